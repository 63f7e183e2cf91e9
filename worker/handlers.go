package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/bigtables/bigtables/protocol"
)

// Failure kinds the reference handler reports (a policy's on_kind may route
// them; docs/protocol.md, "Failure kinds").
const (
	KindRateLimited = "rate_limited" // HTTP 429
	KindUpstream5xx = "upstream_5xx" // HTTP 5xx
	KindGone        = "gone"         // HTTP 404 or 410: not retryable
	KindBadInput    = "bad_input"    // the input_url cannot be requested at all: not retryable
	KindNetwork     = "network"      // no HTTP answer (DNS, connection refused or reset)
)

// KindError is a failure of a named kind, optionally with the delay the
// upstream asked for (HTTP Retry-After): the worker sends them as the
// result's kind and retry_after.
type KindError struct {
	Kind       string
	RetryAfter *protocol.RetryAfter
	Err        error
}

func (e *KindError) Error() string {
	if e.Err == nil {
		return e.Kind
	}
	return e.Err.Error()
}

func (e *KindError) Unwrap() error { return e.Err }

// Kinded wraps err as a failure of kind, with retryAfter (nil: none).
// It composes with Permanent: Kinded("gone", nil, Permanent(reason, err)).
func Kinded(kind string, retryAfter *protocol.RetryAfter, err error) error {
	return &KindError{Kind: kind, RetryAfter: retryAfter, Err: err}
}

// ParseRetryAfter reads an HTTP Retry-After header: delay-seconds or an
// HTTP date (RFC 9110, 10.2.3). It returns nil when the header is absent or
// unreadable.
func ParseRetryAfter(h string) *protocol.RetryAfter {
	h = strings.TrimSpace(h)
	if h == "" {
		return nil
	}
	if n, err := strconv.ParseInt(h, 10, 64); err == nil {
		if n < 0 || n > protocol.MaxRetryAfterSeconds {
			return nil
		}
		return protocol.RetryAfterSeconds(float64(n))
	}
	if t, err := http.ParseTime(h); err == nil {
		return protocol.RetryAfterAt(t)
	}
	return nil
}

// HTTPGet returns the reference handler: GET the job's input_url. A 2xx
// answer is a success. Failures carry a kind: 404 and 410 are gone, not
// retryable, with the reason "Provided URL is invalid: <url>"; 429 is
// rate_limited and 5xx upstream_5xx, both with the answer's Retry-After as
// retry_after when it has one; a URL that cannot be requested is bad_input,
// not retryable; no answer at all is network. Anything else (other
// statuses, the deadline) is a retryable failure without a kind. The body is
// read and discarded, up to 64 MiB.
func HTTPGet(client *http.Client) Handler {
	if client == nil {
		client = http.DefaultClient
	}
	return func(ctx context.Context, job protocol.Job) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, job.InputURL, nil)
		if err != nil {
			return Kinded(KindBadInput, nil, Permanent("Provided URL is invalid: "+job.InputURL, err))
		}
		resp, err := client.Do(req)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // its text repeats the method and URL
			}
			err = fmt.Errorf("GET %s: %w", job.InputURL, err)
			if ctx.Err() != nil {
				return err // the deadline or a cancellation: not the upstream's doing
			}
			return Kinded(KindNetwork, nil, err)
		}
		defer resp.Body.Close()
		_, copyErr := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<20))
		status := fmt.Errorf("GET %s: %s", job.InputURL, resp.Status)
		switch code := resp.StatusCode; {
		case code == http.StatusNotFound || code == http.StatusGone:
			return Kinded(KindGone, nil, Permanent("Provided URL is invalid: "+job.InputURL, status))
		case code == http.StatusTooManyRequests:
			return Kinded(KindRateLimited, ParseRetryAfter(resp.Header.Get("Retry-After")), status)
		case code >= 500 && code <= 599:
			return Kinded(KindUpstream5xx, ParseRetryAfter(resp.Header.Get("Retry-After")), status)
		case code < 200 || code > 299:
			return status
		case copyErr != nil:
			return fmt.Errorf("GET %s: read body: %w", job.InputURL, copyErr)
		}
		return nil
	}
}

// Exec returns a handler that runs command with sh -c for each job, with the
// job's JSON on standard input and BIGTABLES_* variables set (uid, attempt
// uid, input URL, deadline). Exit status 0 is a success; anything else,
// including being killed at the deadline, is a retryable failure whose
// message is the last non-empty line the command wrote to standard error.
//
// Each job runs in a process group of its own (on Unix): a Ctrl-C at the
// terminal, or a signal to the worker's group, does not reach it, so a
// worker that is told to stop can finish the job in hand. When the job's
// context ends (its deadline, a superseded attempt, an abort) the whole group
// is killed, the shell's children too; when the command exits, whatever it
// left running in its group is killed: nothing a job starts outlives it.
func Exec(command string) Handler {
	return func(ctx context.Context, job protocol.Job) error {
		cmd := exec.CommandContext(ctx, "sh", "-c", command)
		cmd.Stdin = bytes.NewReader(job.Encode())
		cmd.Env = append(cmd.Environ(),
			"BIGTABLES_UID="+job.BigTableUID,
			"BIGTABLES_ATTEMPT_UID="+job.AttemptUID,
			"BIGTABLES_INPUT_URL="+job.InputURL,
			"BIGTABLES_DEADLINE_AT="+job.DeadlineAt.UTC().Format(time.RFC3339Nano),
		)
		// Standard error is a pipe of ours rather than a writer, so that Wait
		// returns when sh exits even while a child it left holds the pipe:
		// the group is killed first, then the pipe read to its end.
		pr, pw, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("command: pipe for standard error: %w", err)
		}
		defer pr.Close()
		cmd.Stderr = pw
		ownProcessGroup(cmd)
		cmd.WaitDelay = 2 * time.Second // then sh itself is killed, if killing its group failed
		err = cmd.Start()
		pw.Close()
		if err != nil {
			return fmt.Errorf("start command: %w", err)
		}
		var stderr tail
		copied := make(chan struct{})
		go func() {
			defer close(copied)
			io.Copy(&stderr, pr)
		}()
		err = cmd.Wait()
		killProcessGroup(cmd.Process.Pid) // whatever the command left running
		select {
		case <-copied:
		case <-time.After(2 * time.Second): // a process that left the group holds the pipe
			pr.Close()
			<-copied
		}
		if err == nil {
			return nil
		}
		msg := stderr.lastLine()
		if ctx.Err() != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("command stopped at the deadline: %w", ctx.Err())
			}
			return fmt.Errorf("command stopped: %w", context.Cause(ctx))
		}
		var exit *exec.ExitError
		if errors.As(err, &exit) && msg != "" {
			return errors.New(msg)
		}
		if msg != "" {
			return fmt.Errorf("%s: %w", msg, err)
		}
		return fmt.Errorf("command failed: %w", err)
	}
}

// tail keeps the last 4 KiB written to it.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tail) lastLine() string {
	lines := strings.Split(strings.TrimSpace(string(t.b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
