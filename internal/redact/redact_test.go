package redact

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for raw, want := range map[string]string{
		"rediss://u:hunter2@h:6380/1":                      "rediss://u:xxxxx@h:6380/1",
		"postgres://bt:s3cr%40t@db:5432/x?sslmode=disable": "postgres://bt:xxxxx@db:5432/x?sslmode=disable",
		"redis://127.0.0.1:6379/0":                         "redis://127.0.0.1:6379/0",
		"redis://:hunter2@h/0":                             "redis://:xxxxx@h/0",
		"postgres://u:pw@[::1":                             "(unparsable URL)",
	} {
		if got := URL(raw); got != want {
			t.Errorf("URL(%q) = %q; want %q", raw, got, want)
		}
	}
}

func TestError(t *testing.T) {
	base := errors.New("dial redis://u:s3cr@t@h: s3cr%40t refused")
	err := Error(base, "redis://u:s3cr%40t@h/0")
	if strings.Contains(err.Error(), "s3cr") || !errors.Is(err, base) {
		t.Errorf("Error = %q (is base: %v)", err, errors.Is(err, base))
	}
	if Error(io.EOF, "redis://h/0") != io.EOF || Error(nil, "redis://u:p@h") != nil {
		t.Error("an error without a password to hide should come back as is")
	}
}
