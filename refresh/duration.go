package refresh

import (
	"encoding/json"
	"fmt"
	"math"
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

// ParseDuration reads a duration from 0 to 10 years (AnyDuration) in any
// of the forms users write:
//
//   - Go: "90s", "1h30m", "0"
//   - ISO 8601: "PT5M", "P1D", "P1W", "P1DT2H" (years and months are refused:
//     they have no fixed length)
//   - words: "1 minute", "5 minute", "10 minutes", "2 hours",
//     "1 day", "1 week", also combined: "1 hour 30 minutes", "1 hour and 30 minutes"
//
// The error says what was wrong and what is expected. A field with a
// narrower rule parses with its own Range, so that its errors state that
// rule alone.
func ParseDuration(s string) (time.Duration, error) {
	return AnyDuration.Parse(s)
}

// Range is the rule a duration keeps: from Min to Max. Errors state it
// with String, so each field's messages state one rule.
type Range struct {
	Min, Max time.Duration
	// Zero, when Min is 0, says what 0 means ("never").
	Zero string
}

// The ranges of the policy's durations, and of any duration.
var (
	AnyDuration  = Range{Max: MaxDuration}
	TimeoutRange = Range{Min: time.Second, Max: MaxTimeout}
	DelayRange   = Range{Max: MaxDelay}
	GiveUpRange  = Range{Max: MaxGiveUp, Zero: "never"}
)

// String states the rule: "from 1s to 7 days", "from 0s (never) to 10
// years".
func (r Range) String() string {
	lo := humanBound(r.Min)
	if r.Min == 0 && r.Zero != "" {
		lo += " (" + r.Zero + ")"
	}
	return "from " + lo + " to " + humanBound(r.Max)
}

// Contains reports whether d keeps the rule.
func (r Range) Contains(d time.Duration) bool { return d >= r.Min && d <= r.Max }

// Parse reads s as ParseDuration does and checks it against r.
func (r Range) Parse(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("empty duration: expected e.g. 90s, 5m, PT5M or \"5 minutes\", %s", r)
	}
	d, err := parseDuration(in)
	if err != nil {
		return 0, err
	}
	switch {
	case d < 0:
		return 0, fmt.Errorf("duration %q is negative: expected %s", s, r)
	case d < r.Min:
		return 0, fmt.Errorf("duration %q is too short: expected %s", s, r)
	case d > r.Max:
		return 0, fmt.Errorf("duration %q is too long: expected %s", s, r)
	}
	return d, nil
}

// humanBound writes a range's bound: 1s, 7 days, 365 days, 10 years.
func humanBound(d time.Duration) string {
	const day, year = 24 * time.Hour, 365 * 24 * time.Hour
	switch {
	case d >= 2*year && d%year == 0:
		return strconv.Itoa(int(d/year)) + " years"
	case d >= 2*day && d%day == 0:
		return strconv.Itoa(int(d/day)) + " days"
	}
	return FormatDuration(d)
}

// saturate converts a float of nanoseconds to a Duration, the largest one
// for anything larger: a range then calls it too long.
func saturate(ns float64) time.Duration {
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// parseDuration reads the syntax alone: negative values come back
// negative, values too large for a Duration as the largest one.
func parseDuration(in string) (time.Duration, error) {
	if d, err := time.ParseDuration(in); err == nil {
		return d, nil
	}
	if rest, ok := strings.CutPrefix(in, "-"); ok && !strings.HasPrefix(rest, "-") {
		d, err := parseDuration(strings.TrimSpace(rest))
		return -d, err
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
		return saturate(d), nil
	}
	// Words: "1 hour 30 minutes", "1 hour and 30 minutes", "5 minute"; Go
	// durations too large for time.ParseDuration ("100000000h") as well.
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
	}
	return saturate(total), nil
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
