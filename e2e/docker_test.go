package e2e_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/bigtables/bigtables/internal/testsvc"
)

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var digest = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)

// The Docker files keep their promises: base and service images pinned by
// digest, one image built once and reused, a numeric non-root user, a
// build context without bin/, .git or node_modules, host ports that leave
// the local services' 5432 and 6379 alone, and time zones embedded.
func TestDockerFiles(t *testing.T) {
	dockerfile := readRepoFile(t, "Dockerfile")
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(dockerfile, -1)
	if len(froms) != 2 {
		t.Errorf("Dockerfile: %d FROM lines; want a build and a runtime stage", len(froms))
	}
	for _, m := range froms {
		if !digest.MatchString(m[1]) {
			t.Errorf("Dockerfile: FROM %s is not pinned by digest", m[1])
		}
	}
	if !regexp.MustCompile(`(?m)^USER [0-9]+:[0-9]+$`).MatchString(dockerfile) {
		t.Errorf("Dockerfile: no numeric USER uid:gid")
	}

	ignore := strings.Fields(readRepoFile(t, ".dockerignore"))
	for _, want := range []string{".git", "bin", "**/node_modules", ".tmp", "*.test", "*.prof"} {
		if !slices.Contains(ignore, want) {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}

	compose := readRepoFile(t, "docker-compose.yml")
	if n := len(regexp.MustCompile(`(?m)^\s+build:`).FindAllString(compose, -1)); n != 1 {
		t.Errorf("docker-compose.yml: %d build sections; want 1 (one image, built once)", n)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s+image:\s*(\S+)`).FindAllStringSubmatch(compose, -1) {
		if m[1] != "bigtables:local" && !digest.MatchString(m[1]) {
			t.Errorf("docker-compose.yml: image %s is neither bigtables:local nor pinned by digest", m[1])
		}
	}
	ports := regexp.MustCompile(`(?m)^\s+ports:\s*\["127\.0\.0\.1:\$\{BIGTABLES_(PG|REDIS)_PORT:-([0-9]+)\}:[0-9]+"\]$`).FindAllStringSubmatch(compose, -1)
	if len(ports) != 2 || strings.Count(compose, "ports:") != 2 {
		t.Errorf("docker-compose.yml: want two ports lines, 127.0.0.1:${BIGTABLES_PG_PORT:-N} and ${BIGTABLES_REDIS_PORT:-N}; got %q", ports)
	}
	for _, p := range ports {
		if p[2] == "5432" || p[2] == "6379" {
			t.Errorf("docker-compose.yml: %s port defaults to %s, the local service's port", p[1], p[2])
		}
	}

	if !regexp.MustCompile(`(?m)^HEALTHCHECK .*CMD \["bigtables-healthcheck"\]$`).MatchString(dockerfile) ||
		!strings.Contains(dockerfile, "COPY scripts/docker-healthcheck.sh /usr/local/bin/bigtables-healthcheck") {
		t.Errorf("Dockerfile: no HEALTHCHECK running scripts/docker-healthcheck.sh")
	}
	if !regexp.MustCompile(`(?m)^\s+BIGTABLES_HTTP: \S+:[0-9]+$`).MatchString(compose) {
		t.Errorf("docker-compose.yml: the services set no BIGTABLES_HTTP, so the HEALTHCHECK has nothing to ask")
	}

	if !strings.Contains(readRepoFile(t, "cmd/bigtables/main.go"), `_ "time/tzdata"`) {
		t.Errorf("cmd/bigtables does not embed time/tzdata: TZIDs would fail in a slim image")
	}
}

// Compose itself accepts docker-compose.yml, and the port variables work.
// `make test` installs Debian's docker-compose first (make docker-config).
func TestDockerComposeConfig(t *testing.T) {
	cmd := exec.Command("../scripts/compose.sh", "config")
	cmd.Env = append(os.Environ(), "BIGTABLES_PG_PORT=25432", "BIGTABLES_REDIS_PORT=26379")
	out, err := cmd.CombinedOutput()
	if exit, ok := err.(*exec.ExitError); ok && exit.ExitCode() == 127 {
		if os.Getenv("CI") != "" {
			t.Fatalf("no Docker Compose in CI (make docker-config installs it): %s", out)
		}
		t.Skipf("skipping: no Docker Compose installed (make docker-config installs Debian's): %s", out)
	}
	if err != nil {
		t.Fatalf("compose config: %v\n%s", err, out)
	}
	for _, want := range []string{"25432", "26379", "bigtables:local"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("compose config output lacks %s:\n%s", want, out)
		}
	}
}

// The image's HEALTHCHECK script is healthy on a 200 from /healthz on
// BIGTABLES_HTTP's port, unhealthy on a 503 or when nothing listens, and
// healthy when BIGTABLES_HTTP is unset (a one-off command has no endpoint).
func TestDockerHealthcheckScript(t *testing.T) {
	testsvc.Tool(t, "bash")
	serve := func(code int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/healthz" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(code)
		}))
		t.Cleanup(srv.Close)
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		return port
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, closedPort, _ := net.SplitHostPort(closed.Addr().String())
	closed.Close()
	for _, tt := range []struct {
		name, http string
		healthy    bool
	}{
		{"200", "0.0.0.0:" + serve(http.StatusOK), true},
		{"503", "127.0.0.1:" + serve(http.StatusServiceUnavailable), false},
		{"nothing listens", ":" + closedPort, false},
		{"no BIGTABLES_HTTP", "", true},
	} {
		cmd := exec.Command("../scripts/docker-healthcheck.sh")
		cmd.Env = append(os.Environ(), "BIGTABLES_HTTP="+tt.http)
		out, err := cmd.CombinedOutput()
		if (err == nil) != tt.healthy {
			t.Errorf("%s: err %v, output %q; want healthy %v", tt.name, err, out, tt.healthy)
		}
	}
}
