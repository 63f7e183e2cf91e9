// Package redact keeps passwords out of everything bigtables prints: URLs
// in errors, log lines and flag help. It is the one place that knows how.
// It imports only the standard library, so every package may use it.
package redact

import (
	"net/url"
	"strings"
)

// Mask replaces a password.
const Mask = "xxxxx"

// URL returns rawURL with its password, if any, replaced by Mask. A URL
// that does not parse is not printed at all (it may hold a password in a
// place the parser did not find).
func URL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// Error returns err with every spelling of rawURL's password (as written,
// query-escaped, path-escaped) in its text replaced by Mask. errors.Is and
// errors.As still see err. A URL without a password returns err itself.
func Error(err error, rawURL string) error {
	if err == nil {
		return nil
	}
	u, perr := url.Parse(rawURL)
	if perr != nil || u.User == nil {
		return err
	}
	pw, ok := u.User.Password()
	if !ok || pw == "" {
		return err
	}
	msg := err.Error()
	for _, s := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw)} {
		msg = strings.ReplaceAll(msg, s, Mask)
	}
	return redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }
