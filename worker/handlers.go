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
	"strings"
	"time"

	"github.com/bigtables/bigtables/protocol"
)

// HTTPGet returns the reference handler: GET the job's input_url. A 2xx
// answer is a success; 404 and 410 are failures that are not retryable, with
// the reason "Provided URL is invalid: <url>"; anything else (other statuses,
// network errors, the deadline) is a retryable failure. The body is read and
// discarded, up to 64 MiB.
func HTTPGet(client *http.Client) Handler {
	if client == nil {
		client = http.DefaultClient
	}
	return func(ctx context.Context, job protocol.Job) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, job.InputURL, nil)
		if err != nil {
			return Permanent("Provided URL is invalid: "+job.InputURL, err)
		}
		resp, err := client.Do(req)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // its text repeats the method and URL
			}
			return fmt.Errorf("GET %s: %w", job.InputURL, err)
		}
		defer resp.Body.Close()
		_, copyErr := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<20))
		switch {
		case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
			return Permanent("Provided URL is invalid: "+job.InputURL, fmt.Errorf("GET %s: %s", job.InputURL, resp.Status))
		case resp.StatusCode < 200 || resp.StatusCode > 299:
			return fmt.Errorf("GET %s: %s", job.InputURL, resp.Status)
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
