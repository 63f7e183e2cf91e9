package web

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds Debian's chromium (scripts/browser-deps.sh installs
// it): a missing browser skips the test on a developer's machine and fails
// it in CI.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed in CI (scripts/browser-deps.sh installs it)")
	}
	t.Skip("skipping: chromium is not installed (run scripts/browser-deps.sh, or set CI=1 to make this a failure)")
	return ""
}

// screenshotDir is where the browser test saves its screenshots: docs/
// when UPDATE_SCREENSHOTS is set (README shows them), else a temporary
// directory.
func screenshotDir(t *testing.T) string {
	if os.Getenv("UPDATE_SCREENSHOTS") != "" {
		return filepath.Join("..", "docs")
	}
	return t.TempDir()
}

// TestBrowser opens every page in headless Chromium against a system with
// records in every phase (one parked by its upstream's open breaker), signs in, clicks refresh now, re-enable and
// requeue, and checks each result in PostgreSQL and Redis.
func TestBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	s := newSystem(t)
	s.seed()
	ts := s.dashboard(testToken)
	shots := screenshotDir(t)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-default-browser-check", true),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancelC := chromedp.NewContext(actx)
	defer cancelC()
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelT()

	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }
	click := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(sel)) }

	// Overview: counts by phase, the chart, the final failure; the script
	// shows the auto-refresh switch (so the CSP lets it run).
	do("overview", chromedp.Navigate(ts.URL+"/"), visible("svg.chart"))
	main := text("main")
	for _, want := range []string{"The file at the URL does not exist", "live pollers", "Attempts per minute"} {
		if !strings.Contains(main, want) {
			t.Errorf("overview text lacks %q:\n%s", want, main)
		}
	}
	if hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("autorefresh").parentElement.hidden`)); err != nil || hidden {
		t.Errorf("the auto-refresh switch stays hidden (app.js did not run): %v", err)
	}

	// Sign in.
	do("sign in", chromedp.Navigate(ts.URL+"/login"), visible(`input[name=token]`),
		chromedp.SetValue(chromedp.CSS(`input[name=who]`), "browser"), chromedp.SendKeys(chromedp.CSS(`input[name=token]`), testToken),
		click(`form.stack button`), visible(`svg.chart`))
	if h := strings.Join(strings.Fields(text("header")), " "); !strings.Contains(h, "signed in as browser") {
		t.Fatalf("after sign-in the header says %q", h)
	}
	shot("dashboard-overview.png")

	// Records, then the retrying record's page: refresh now.
	do("records", chromedp.Navigate(ts.URL+"/records?sort=uid"), visible("#records"))
	list := text("#records")
	for _, uid := range []string{"waiting", "retrying", "running", "disabled", "paused", "idle", "parked", "<b>escaped</b>"} {
		if !strings.Contains(list, uid) {
			t.Errorf("records lack %q", uid)
		}
	}
	shot("dashboard-records.png")
	before := s.get("retrying").RefreshAt
	do("record", chromedp.Navigate(ts.URL+"/record?uid=retrying"), visible("svg.gantt"))
	if next := text("#next"); !strings.Contains(next, "If it fails (after 1 minute), retry at") {
		t.Errorf("what happens next: %q", next)
	}
	shot("dashboard-record.png")
	do("refresh now", click("#act-run"), visible(".notice"))
	if after, notice := s.get("retrying").RefreshAt, text(".notice"); !after.Before(before) || !strings.Contains(notice, "due now") {
		t.Errorf("refresh now: refresh_at %v -> %v, notice %q", before, after, notice)
	}

	// Upstreams: the open breaker of the parked record's upstream.
	do("upstreams", chromedp.Navigate(ts.URL+"/upstreams"), visible("#upstreams"))
	if ups := text("#upstreams"); !strings.Contains(ups, "flaky.example") || !strings.Contains(ups, "open") ||
		!strings.Contains(ups, "at most 5 in flight") {
		t.Errorf("upstreams: %q", ups)
	}
	shot("dashboard-upstreams.png")

	// Re-enable the disabled record.
	do("re-enable", chromedp.Navigate(ts.URL+"/record?uid=disabled"), visible("#act-reenable"), click("#act-reenable"), visible(".notice"))
	if r := s.get("disabled"); r.Disabled || r.AttemptNo != 0 {
		t.Errorf("re-enable: %+v", r.State)
	}

	// Requeue the dead letter that holds a result.
	do("dead", chromedp.Navigate(ts.URL+"/dead"), visible("#dead"))
	shot("dashboard-dead.png")
	do("requeue", click(`#dead button.requeue`), visible(".notice"))
	d, err := s.q.Depths(context.Background())
	if err != nil || d.Dead != 1 || d.Output != 1 {
		t.Errorf("requeue: %+v %v", d, err)
	}
}
