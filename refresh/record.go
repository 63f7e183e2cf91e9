package refresh

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode"
)

// Limits on what a person sets on a record.
const (
	MaxUIDLen = 200
	MaxURLLen = 2048
)

var schemeRE = regexp.MustCompile(`^[a-z][a-z0-9+.-]*$`)

// ValidateUID checks a record id: 1 to 200 characters, printable, no spaces.
func ValidateUID(uid string) error {
	switch {
	case uid == "":
		return fmt.Errorf("uid is empty: expected 1 to %d printable characters", MaxUIDLen)
	case len(uid) > MaxUIDLen:
		return fmt.Errorf("uid is %d bytes long: at most %d are allowed", len(uid), MaxUIDLen)
	case strings.IndexFunc(uid, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return fmt.Errorf("uid %q contains spaces or control characters", uid)
	}
	return nil
}

// ValidateInputURL checks what workers refresh from: an absolute URL with a
// scheme (http, https, s3, ...) and a host, at most 2048 bytes.
func ValidateInputURL(raw string) error {
	if raw == "" {
		return fmt.Errorf("input_url is empty: expected an absolute URL such as https://example.com/data.csv")
	}
	if len(raw) > MaxURLLen {
		return fmt.Errorf("input_url is %d bytes long: at most %d are allowed", len(raw), MaxURLLen)
	}
	if strings.IndexFunc(raw, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return fmt.Errorf("input_url %q contains spaces or control characters: encode them (%%20)", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("input_url %q: %v", raw, err)
	}
	if !u.IsAbs() || !schemeRE.MatchString(u.Scheme) {
		return fmt.Errorf("input_url %q has no scheme: expected an absolute URL such as https://example.com/data.csv", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("input_url %q has no host: expected an absolute URL such as https://example.com/data.csv", raw)
	}
	return nil
}
