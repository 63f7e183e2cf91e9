package refresh

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// kindSpec is everything the package knows about one retry strategy kind:
// which fields it takes, its delay, its own validation rules, how it ends
// and how it reads as a sentence. Adding a kind is adding one entry to
// kinds and its entry to schema/policy.schema.json (TestKindTable checks
// both).
//
// What is not here applies to every kind alike: jitter, the max cap's range,
// alignment with the schedule, timeouts, on_exhausted and give_up_after.
type kindSpec struct {
	name string
	// fields are the JSON names of the Strategy fields the kind takes, in
	// the order error messages list them.
	fields []string
	// required are the fields the JSON Schema requires besides kind.
	required []string
	// safely marks the safely family (docs/design.md, "Words"): max_retry is
	// required, from 0 to
	// 1000, and the failure of attempt max_retry+1 exhausts the retries.
	safely bool
	// randomized is true when the kind draws random numbers even without
	// jitter.
	randomized bool
	// example is a valid strategy of the kind, in the --strategy flag's form.
	example string
	// delay is the delay after failure k >= 1, before jitter, or false when
	// the retries are exhausted (for the safely family, max_retry is checked
	// before delay is called).
	delay func(s Strategy, k int, in Input) (time.Duration, bool)
	// attempts is the number of the attempt whose failure exhausts the
	// retries, or 0 when only the record's age ends them. Nil for the safely
	// family.
	attempts func(s Strategy) int
	// validate checks the values of the kind's own fields (that no foreign
	// field is set is checked before).
	validate func(s Strategy) error
	// explain describes the delays in one sentence; Explain adds the jitter
	// and which failure ends the retries.
	explain func(s Strategy) string
}

// kinds is the table of strategy kinds, in the order error messages list
// them.
var kinds = []kindSpec{
	{
		name: KindList, fields: []string{"delays", "jitter"},
		example: "list delays=0,1m,5m",
		delay: func(s Strategy, k int, _ Input) (time.Duration, bool) {
			if k > len(s.Delays) {
				return 0, false
			}
			return time.Duration(s.Delays[k-1]), true
		},
		attempts: func(s Strategy) int { return len(s.Delays) + 1 },
		validate: func(s Strategy) error {
			if len(s.Delays) > MaxRetries {
				return badStrategy("list: delays has %d entries: at most %d", len(s.Delays), MaxRetries)
			}
			for i, d := range s.Delays {
				if d < 0 || d > Duration(MaxDelay) {
					return badStrategy("list: delays[%d] %s: expected from 0s to 365 days", i, d)
				}
			}
			return nil
		},
		explain: func(s Strategy) string {
			parts := make([]string, len(s.Delays))
			for i, d := range s.Delays {
				parts[i] = humanD(d)
			}
			return "After failure k, retry after the k-th of: " + strings.Join(parts, ", ")
		},
	},
	{
		name: KindExponential, fields: []string{"initial", "multiplier", "max", "max_attempts", "jitter"},
		example: "exponential initial=5s multiplier=2 max=300s max_attempts=8",
		delay: counted(func(s Strategy, k int) float64 {
			return float64(s.Initial) * math.Pow(s.multiplier(), float64(k-1))
		}),
		attempts: maxAttempts,
		validate: func(s Strategy) error {
			if err := firstErr(positive(s, "initial", s.Initial), checkMaxAttempts(s)); err != nil {
				return err
			}
			if s.Multiplier != 0 && (s.Multiplier < 1 || s.Multiplier > 100) {
				return badStrategy("exponential: multiplier %v: expected 1 to 100", s.Multiplier)
			}
			return nil
		},
		explain: func(s Strategy) string {
			return fmt.Sprintf("After failure k, retry after %s × %v^(k-1)%s", humanD(s.Initial), s.multiplier(), s.capText())
		},
	},
	{
		name: KindLinear, fields: []string{"initial", "max", "max_attempts", "jitter"},
		required: []string{"initial", "max_attempts"},
		example:  "linear initial=5s max=1m max_attempts=5",
		delay:    counted(func(s Strategy, k int) float64 { return float64(s.Initial) * float64(k) }),
		attempts: maxAttempts,
		validate: func(s Strategy) error {
			return firstErr(positive(s, "initial", s.Initial), checkMaxAttempts(s))
		},
		explain: func(s Strategy) string {
			return fmt.Sprintf("After failure k, retry after %s × k%s", humanD(s.Initial), s.capText())
		},
	},
	{
		name: KindFibonacci, fields: []string{"unit", "max", "max_attempts", "jitter"},
		required: []string{"unit"},
		example:  "fibonacci unit=1m max_attempts=7",
		delay:    counted(func(s Strategy, k int) float64 { return float64(s.Unit) * fib(k) }),
		attempts: maxAttempts,
		validate: func(s Strategy) error {
			if s.MaxAttempts == 0 {
				// No count ends it: the policy requires give_up_after.
				return positive(s, "unit", s.Unit)
			}
			return firstErr(positive(s, "unit", s.Unit), checkMaxAttempts(s))
		},
		explain: func(s Strategy) string {
			return fmt.Sprintf("After failure k, retry after %s × fib(k) (1, 1, 2, 3, 5, 8, ...)%s", humanD(s.Unit), s.capText())
		},
	},
	{
		name: KindProgressive, fields: []string{"bands"},
		example: "progressive bands=24h:5m,168h:1h",
		delay: func(s Strategy, _ int, in Input) (time.Duration, bool) {
			for _, b := range s.bands() {
				if in.FailingFor < time.Duration(b.Until) {
					return time.Duration(b.Every), true
				}
			}
			return 0, false
		},
		attempts: func(Strategy) int { return 0 },
		validate: func(s Strategy) error {
			var last Duration
			for i, b := range s.Bands {
				if b.Until <= last {
					return badStrategy("progressive: bands[%d].until %s: expected more than the previous band's (%s)", i, b.Until, last)
				}
				if err := positive(s, fmt.Sprintf("bands[%d].every", i), b.Every); err != nil {
					return err
				}
				last = b.Until
			}
			return nil
		},
		explain: func(s Strategy) string {
			var parts []string
			for _, b := range s.bands() {
				parts = append(parts, fmt.Sprintf("every %s while failing for less than %s", humanD(b.Every), humanD(b.Until)))
			}
			return "Retry " + strings.Join(parts, ", ") + ", then stop retrying"
		},
	},
	{
		name: KindFix, fields: []string{"ms", "max_retry"}, safely: true,
		required: []string{"max_retry"},
		example:  "fix ms=3000 max_retry=3",
		delay:    func(s Strategy, _ int, _ Input) (time.Duration, bool) { return ms(s.Ms), true },
		validate: func(s Strategy) error { return msIn(s, "ms", s.Ms) },
		explain:  func(s Strategy) string { return "After each failure, retry after " + humanMs(s.Ms) },
	},
	{
		name: KindRandomRange, fields: []string{"min_ms", "max_ms", "max_retry"}, safely: true, randomized: true,
		required: []string{"max_ms", "max_retry"},
		example:  "random-range min_ms=2000 max_ms=5000 max_retry=3",
		delay: func(s Strategy, _ int, in Input) (time.Duration, bool) {
			return ms(s.MinMs + int64(in.Draw*float64(s.MaxMs-s.MinMs))), true
		},
		validate: func(s Strategy) error {
			if err := firstErr(msIn(s, "min_ms", s.MinMs), msIn(s, "max_ms", s.MaxMs)); err != nil {
				return err
			}
			if s.MaxMs <= s.MinMs {
				return badStrategy("random-range: max_ms %d: expected more than min_ms %d", s.MaxMs, s.MinMs)
			}
			return nil
		},
		explain: func(s Strategy) string {
			return fmt.Sprintf("After each failure, retry after a random delay from %s to %s", humanMs(s.MinMs), humanMs(s.MaxMs))
		},
	},
	{
		name: KindRandom, fields: []string{"base_ms", "pct", "max_retry"}, safely: true, randomized: true,
		required: []string{"base_ms", "max_retry"},
		example:  "random base_ms=3000 pct=0.5 max_retry=3",
		delay: func(s Strategy, _ int, in Input) (time.Duration, bool) {
			return ms(safelyRandom(s.BaseMs, s.Pct, in.Draw)), true
		},
		validate: func(s Strategy) error { return firstErr(msIn(s, "base_ms", s.BaseMs), checkPct(s)) },
		explain: func(s Strategy) string {
			return fmt.Sprintf("After each failure, retry after %s ± %v%%", humanMs(s.BaseMs), s.Pct*100)
		},
	},
	{
		name: KindRandomExpBackoff, fields: []string{"base_ms", "pct", "max_ms", "max_retry"}, safely: true, randomized: true,
		required: []string{"base_ms", "max_retry"},
		example:  "random-exp-backoff base_ms=3000 pct=0.5 max_ms=240000 max_retry=3",
		delay: func(s Strategy, k int, in Input) (time.Duration, bool) {
			return ms(safelyRandom(ExpBackoffMs(s.BaseMs, k, s.MaxMs), s.Pct, in.Draw)), true
		},
		validate: func(s Strategy) error {
			if s.BaseMs < 1 {
				return badStrategy("random-exp-backoff: base_ms %d: expected at least 1", s.BaseMs)
			}
			return firstErr(msIn(s, "max_ms", s.MaxMs), checkPct(s))
		},
		explain: func(s Strategy) string {
			line := fmt.Sprintf("After failure k, retry after safely's exponential backoff from %s (%s, %s, %s, ...)", humanMs(s.BaseMs),
				humanMs(ExpBackoffMs(s.BaseMs, 1, s.MaxMs)), humanMs(ExpBackoffMs(s.BaseMs, 2, s.MaxMs)), humanMs(ExpBackoffMs(s.BaseMs, 3, s.MaxMs)))
			if s.MaxMs > 0 {
				line += ", at most " + humanMs(s.MaxMs)
			}
			return line + s.pctText()
		},
	},
	{
		name: KindRandCycle, fields: []string{"cycle_ms", "pct", "max_retry"}, safely: true, randomized: true,
		required: []string{"cycle_ms", "max_retry"},
		example:  "rand-cycle cycle_ms=1000,2000 pct=0.1 max_retry=3",
		delay: func(s Strategy, k int, in Input) (time.Duration, bool) {
			return ms(safelyRandom(s.CycleMs[(k-1)%len(s.CycleMs)], s.Pct, in.Draw)), true
		},
		validate: func(s Strategy) error {
			if len(s.CycleMs) == 0 {
				return badStrategy("rand-cycle: cycle_ms is empty: expected a list of delays in milliseconds")
			}
			for i, v := range s.CycleMs {
				if err := msIn(s, fmt.Sprintf("cycle_ms[%d]", i), v); err != nil {
					return err
				}
			}
			return checkPct(s)
		},
		explain: func(s Strategy) string {
			parts := make([]string, len(s.CycleMs))
			for i, v := range s.CycleMs {
				parts[i] = humanMs(v)
			}
			return "After each failure, retry after the next of " + strings.Join(parts, ", ") + " (cycling)" + s.pctText()
		},
	},
}

// kindOf returns the spec of a kind.
func kindOf(kind string) (*kindSpec, bool) {
	for i := range kinds {
		if kinds[i].name == kind {
			return &kinds[i], true
		}
	}
	return nil, false
}

// kindNames lists the kinds as error messages do: "a, b, c or d".
func kindNames() string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.name
	}
	return strings.Join(names, ", ")
}

// strategyField is one optional field of Strategy, by its JSON name.
type strategyField struct {
	name string
	// isSet reports whether the field is set (a foreign field that is set
	// is refused).
	isSet func(s Strategy) bool
	// compact is how the --strategy flag writes its value.
	compact compactForm
	// schema is the field's JSON Schema, as in schema/policy.schema.json.
	schema string
}

// compactForm is how the --strategy flag writes one field's value.
type compactForm int

const (
	compactText      compactForm = iota // as is: a duration
	compactNumber                       // a JSON number
	compactDurations                    // comma-separated durations
	compactNumbers                      // comma-separated numbers
	compactBands                        // until:every pairs, comma-separated
	compactJitter                       // kind[:fraction]
)

const (
	schemaDuration    = `{"$ref": "#/$defs/duration"}`
	schemaMs          = `{"$ref": "#/$defs/ms"}`
	schemaMaxAttempts = `{"type": "integer", "minimum": 1, "maximum": 1000, "description": "the failure of this attempt exhausts the retries"}`
	schemaMaxRetry    = `{"type": "integer", "minimum": 0, "maximum": 1000, "description": "safely's :max-retry: N retries, N+1 attempts in all"}`
	schemaPct         = `{"type": "number", "minimum": 0, "maximum": 1, "description": "+/- fraction of the delay"}`
)

// strategyFields are Strategy's fields besides kind, in the order setFields
// lists them.
var strategyFields = []strategyField{
	{"delays", func(s Strategy) bool { return s.Delays != nil }, compactDurations,
		`{"type": "array", "maxItems": 100, "items": {"$ref": "#/$defs/duration"}}`},
	{"initial", func(s Strategy) bool { return s.Initial != 0 }, compactText, schemaDuration},
	{"multiplier", func(s Strategy) bool { return s.Multiplier != 0 }, compactNumber,
		`{"type": "number", "minimum": 1, "maximum": 100}`},
	{"unit", func(s Strategy) bool { return s.Unit != 0 }, compactText, schemaDuration},
	{"max", func(s Strategy) bool { return s.Max != 0 }, compactText, schemaDuration},
	{"max_attempts", func(s Strategy) bool { return s.MaxAttempts != 0 }, compactNumber, schemaMaxAttempts},
	{"bands", func(s Strategy) bool { return s.Bands != nil }, compactBands,
		`{"type": "array", "items": {"type": "object", "required": ["until", "every"], "additionalProperties": false,
		  "properties": {"until": {"$ref": "#/$defs/duration"}, "every": {"$ref": "#/$defs/duration"}}}}`},
	{"jitter", func(s Strategy) bool { return s.Jitter != nil }, compactJitter, `{"$ref": "#/$defs/jitter"}`},
	{"ms", func(s Strategy) bool { return s.Ms != 0 }, compactNumber, schemaMs},
	{"min_ms", func(s Strategy) bool { return s.MinMs != 0 }, compactNumber, schemaMs},
	{"max_ms", func(s Strategy) bool { return s.MaxMs != 0 }, compactNumber, schemaMs},
	{"base_ms", func(s Strategy) bool { return s.BaseMs != 0 }, compactNumber, schemaMs},
	{"pct", func(s Strategy) bool { return s.Pct != 0 }, compactNumber, schemaPct},
	{"cycle_ms", func(s Strategy) bool { return s.CycleMs != nil }, compactNumbers,
		`{"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/ms"}}`},
	{"max_retry", func(s Strategy) bool { return s.MaxRetry != nil }, compactNumber, schemaMaxRetry},
}

func fieldOf(name string) (strategyField, bool) {
	for _, f := range strategyFields {
		if f.name == name {
			return f, true
		}
	}
	return strategyField{}, false
}

// Helpers the table's entries share.

func badStrategy(format string, args ...any) error {
	return fmt.Errorf("%w: strategy %s", ErrInvalidPolicy, fmt.Sprintf(format, args...))
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// counted is the delay of a kind ended by max_attempts: grow(s, k), capped
// by max. Without max_attempts (fibonacci bounded by give_up_after) no
// count ends it.
func counted(grow func(s Strategy, k int) float64) func(Strategy, int, Input) (time.Duration, bool) {
	return func(s Strategy, k int, _ Input) (time.Duration, bool) {
		if s.MaxAttempts > 0 && k >= s.MaxAttempts {
			return 0, false
		}
		return s.capped(grow(s, k)), true
	}
}

func maxAttempts(s Strategy) int { return s.MaxAttempts }

func positive(s Strategy, name string, d Duration) error {
	if d <= 0 || d > Duration(MaxDelay) {
		return badStrategy("%s: %s %s: expected more than 0s and at most 365 days", s.Kind, name, d)
	}
	return nil
}

func checkMaxAttempts(s Strategy) error {
	if s.MaxAttempts < 1 || s.MaxAttempts > 1000 {
		return badStrategy("%s: max_attempts %d: expected 1 to 1000 (the failure of that attempt exhausts the retries)", s.Kind, s.MaxAttempts)
	}
	return nil
}

func checkPct(s Strategy) error {
	if s.Pct < 0 || s.Pct > 1 {
		return badStrategy("%s: pct %v: expected 0 to 1", s.Kind, s.Pct)
	}
	return nil
}

func msIn(s Strategy, name string, v int64) error {
	if v < 0 || ms(v) > MaxDelay {
		return badStrategy("%s: %s %d: expected 0 to %d milliseconds", s.Kind, name, v, int64(MaxDelay/time.Millisecond))
	}
	return nil
}

func checkMaxRetry(s Strategy) error {
	if s.MaxRetry == nil {
		return badStrategy("%s: max_retry is required (safely's :max-retry: N retries, N+1 attempts in all)", s.Kind)
	}
	if *s.MaxRetry < 0 || *s.MaxRetry > 1000 {
		return badStrategy("%s: max_retry %d: expected 0 to 1000", s.Kind, *s.MaxRetry)
	}
	return nil
}

func humanD(d Duration) string { return HumanDuration(time.Duration(d)) }

func humanMs(n int64) string { return HumanDuration(ms(n)) }

func (s Strategy) capText() string {
	if s.Max > 0 {
		return ", at most " + humanD(s.Max)
	}
	return ""
}

func (s Strategy) pctText() string {
	if s.Pct > 0 {
		return fmt.Sprintf(", ± %v%%", s.Pct*100)
	}
	return ""
}
