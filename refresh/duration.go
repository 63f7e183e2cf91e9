package refresh

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// MaxDuration is the longest duration ParseDuration accepts: ten years. Longer
// values are almost certainly mistakes (a unit typed wrong).
const MaxDuration = 10 * 365 * 24 * time.Hour

var (
	isoDuration = regexp.MustCompile(`^P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$`)
	wordPair    = regexp.MustCompile(`^(\d+(?:\.\d+)?)\s*(seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h|days?|d|weeks?|w)$`)
	wordUnits   = map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour}
)

// ParseDuration reads a non-negative duration in any of the forms users write:
//
//   - Go: "90s", "1h30m", "0"
//   - ISO 8601: "PT5M", "P1D", "P1W", "P1DT2H" (years and months are refused:
//     they have no fixed length)
//   - words: "1 minute", "5 minute", "10 minutes", "2 hours",
//     "1 day", "1 week", also combined: "1 hour 30 minutes", "1 hour and 30 minutes"
//
// The error says what was wrong and what is expected.
func ParseDuration(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("empty duration: expected e.g. 90s, 5m, PT5M or \"5 minutes\"")
	}
	d, err := parseDuration(in)
	if err != nil {
		return 0, err
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q is negative: expected zero or more", s)
	}
	if d > MaxDuration {
		return 0, fmt.Errorf("duration %q is longer than the maximum of 10 years", s)
	}
	return d, nil
}

func parseDuration(in string) (time.Duration, error) {
	if d, err := time.ParseDuration(in); err == nil {
		return d, nil
	} else if strings.HasPrefix(in, "-") {
		return 0, fmt.Errorf("duration %q is negative: expected zero or more", in)
	}
	if up := strings.ToUpper(in); strings.HasPrefix(up, "P") {
		m := isoDuration.FindStringSubmatch(up)
		if m == nil || up == "P" || strings.HasSuffix(up, "T") {
			return 0, fmt.Errorf("ISO 8601 duration %q: expected PnW, PnD or PnDTnHnMnS (years and months have no fixed length)", in)
		}
		var d float64
		for i, unit := range []time.Duration{7 * 24 * time.Hour, 24 * time.Hour, time.Hour, time.Minute, time.Second} {
			if m[i+1] != "" {
				n, _ := strconv.ParseFloat(m[i+1], 64)
				d += n * float64(unit)
			}
		}
		if d > float64(MaxDuration) {
			return 0, fmt.Errorf("duration %q is longer than the maximum of 10 years", in)
		}
		return time.Duration(d), nil
	}
	// Words: "1 hour 30 minutes", "1 hour and 30 minutes", "5 minute".
	fields := strings.Fields(strings.NewReplacer(",", " ", " and ", " ").Replace(strings.ToLower(in)))
	var total float64
	for i := 0; i < len(fields); {
		pair := fields[i]
		if i+1 < len(fields) && wordPair.MatchString(fields[i]+fields[i+1]) && !wordPair.MatchString(fields[i]) {
			pair = fields[i] + fields[i+1]
			i++
		}
		i++
		m := wordPair.FindStringSubmatch(pair)
		if m == nil {
			return 0, fmt.Errorf("duration %q: expected a Go duration (90s, 1h30m), ISO 8601 (PT5M) or words (\"5 minutes\", \"1 hour\")", in)
		}
		n, _ := strconv.ParseFloat(m[1], 64)
		total += n * float64(wordUnits[m[2][0]])
		if total > float64(MaxDuration) {
			return 0, fmt.Errorf("duration %q is longer than the maximum of 10 years", in)
		}
	}
	return time.Duration(total), nil
}

// FormatDuration renders d in Go form without zero units: 1h, 1h30m, 90s
// becomes 1m30s, 0 becomes 0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// Duration is a time.Duration that reads any form ParseDuration accepts from
// JSON strings and writes the FormatDuration form.
type Duration time.Duration

// MarshalJSON writes the duration as a string such as "1h30m".
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(FormatDuration(time.Duration(d)))
}

// UnmarshalJSON reads a duration string, or the JSON number 0 (zero needs
// no unit: the original design's retries list starts with it); any other
// bare number is refused because its unit would be a guess.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n json.Number
		if json.Unmarshal(b, &n) == nil {
			if f, err := n.Float64(); err == nil && f == 0 {
				*d = 0
				return nil
			}
		}
		return fmt.Errorf("duration %s: expected a string such as \"5m\" or \"PT5M\" (a bare number is accepted only for 0)", b)
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// String returns the FormatDuration form.
func (d Duration) String() string { return FormatDuration(time.Duration(d)) }
