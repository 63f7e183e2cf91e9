package refresh

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Readable is a policy written as sentences (the --expr form), as the
// original BigTable refresh design wrote its examples:
//
//   - Refresh the model every 2 hours
//   - Allow 1 hour for a response
//   - On the first failure, retry immediately
//   - On the second failure, retry after 1 minute
//   - Panic
//
// ParseReadable reads it; Explain writes any policy back as such sentences.
// No sentence is dropped silently: each one sets a field, is kept in the
// policy's notes (which explain prints), or is refused with the sentence
// quoted.
type Readable struct {
	// Schedule is RRULE text (without DTSTART) when a sentence sets the
	// schedule, else "".
	Schedule string
	Policy   Policy
}

var (
	reBullet     = regexp.MustCompile(`^\s*(?:[-*•]|\d+[.)])\s*`)
	reEvery      = regexp.MustCompile(`^refresh(?: the model| (?:the )?bigtable| it)? every (?:(\w+) )?(second|minute|hour|day|week)s?$`)
	reDailyAt    = regexp.MustCompile(`^refresh(?: the model| (?:the )?bigtable| it)? (?:(?:once|twice|\w+ times) (?:per|a) day|daily|every day) at (.+)$`)
	reAllow      = regexp.MustCompile(`^allow (.+?)(?: for a response| to complete| per attempt)?$`)
	reOnFailure  = regexp.MustCompile(`^on the (\w+) failure,? (?:retry )?(immediately|after .+)$`)
	reFinalColon = regexp.MustCompile(`^on the (\w+) failure:?$`)
	reFinalDo    = regexp.MustCompile(`^on the (\w+) failure,? (?:panic|give up|disable.*|mark .*)$`)
	reGiveUpAge  = regexp.MustCompile(`^give up after (.+?) of (?:unsuccessful|failed) (?:refresh )?attempts:?$`)
	rePanic      = regexp.MustCompile(`^(?:panic|give up after the final unsuccessful retry:?|disable auto-refresh|disable refreshing.*|give up)$`)
	reWaitNext   = regexp.MustCompile("^(?:reset `?attempt_no`?|wait until (?:the )?next scheduled refresh|reset `?attempt_no`? and wait until (?:the )?next scheduled refresh)$")
	reEmail      = regexp.MustCompile(`^(?:email|send|notify|tell) the customer\b`)
	reHeader     = regexp.MustCompile(`^(?:retry policy|key moments|on the final failure|when the record is disabled|refresh once \(no schedule\); after a success, wait for a manual update):?$`)
	reStopAll    = regexp.MustCompile(`^(?:after the last retry, )?stop refreshing until a person updates the record$`)
	reMark       = regexp.MustCompile(`(?i)^(?:on the (\w+) failure,? )?mark (?:the|this) (?:[\w-]+ ){0,2}(?:as|with) ["'“‘](.+?)["'”’]?$`)
	reNote       = regexp.MustCompile(`(?i)^note: (.+)$`)
	reSendJob    = regexp.MustCompile(`^send (?:a|an|the) (?:\w+ )?(?:request|job|message|call) to .+$`)
	reKindFinal  = regexp.MustCompile(`(?i)^if the worker reports a failure of kind (\S+), stop refreshing at once until a person updates the record$`)
	reKindAny    = regexp.MustCompile(`^if the worker reports a failure of kind `)
	reRetryAfter = regexp.MustCompile(`^honou?r a worker's retry_after up to (.+)$`)
	reSendEvents = regexp.MustCompile(`(?i)^send (?:this record's )?events to (\S+)$`)
	reSpread     = regexp.MustCompile(`^spread (?:the )?planned refreshes over (.+?)(?:: each record keeps its own random offset)?$`)
	reTimeSep    = regexp.MustCompile(`\s*(?:,|\band\b)\s*`)
	reClock      = regexp.MustCompile(`^(\d{1,2})(?::(\d\d))?\s*(am|pm)?$`)
	reNoRetry    = regexp.MustCompile(`^(?:do not|don't|never) retry$`)
	reAlign      = regexp.MustCompile(`^(?:keep refreshes aligned with the schedule.*|start refresh every day at a specific time.*)$`)
	reNoAlign    = regexp.MustCompile(`^do not (?:keep refreshes )?align.*$`)
	numberWords  = map[string]int{"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
		"seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20, "thirty": 30}
	ordinalWords = []string{"", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
		"tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth",
		"eighteenth", "nineteenth", "twentieth"}
)

func ordinal(word string) (int, bool) {
	for i, w := range ordinalWords {
		if i > 0 && w == word {
			return i, true
		}
	}
	n, err := strconv.Atoi(strings.TrimRight(word, "stndrh"))
	return n, err == nil && n > 0 && n <= MaxRetries+1
}

func ordinalName(n int) string {
	if n < len(ordinalWords) {
		return ordinalWords[n]
	}
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}

// wordsDuration reads "one week", "an hour", "1 hour", "PT5M"...
func wordsDuration(s string) (time.Duration, error) {
	f := strings.Fields(s)
	if len(f) > 0 {
		if n, ok := numberWords[f[0]]; ok {
			f[0] = strconv.Itoa(n)
		}
	}
	return ParseDuration(strings.Join(f, " "))
}

// ParseReadable reads a policy written as sentences, one a line (bullets and
// numbering are fine), on top of base (DefaultPolicy when nil): every retry
// sentence replaces base's strategy. A sentence it does not understand is an
// error that quotes it.
func ParseReadable(text string, base *Policy) (Readable, error) {
	out := Readable{Policy: DefaultPolicy()}
	if base != nil {
		out.Policy = base.clone()
	}
	var delays []Duration
	sawRetry := false
	afterGiveUp := false // lines under "Give up after one week ...:" describe the giving up
	for _, raw := range strings.Split(strings.ReplaceAll(text, `\n`, "\n"), "\n") {
		line := strings.TrimSpace(reBullet.ReplaceAllString(raw, ""))
		line = strings.TrimRight(line, ".")
		l := strings.ToLower(strings.Join(strings.Fields(line), " "))
		if l == "" {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: %q: %s", ErrInvalidPolicy, line, fmt.Sprintf(format, args...))
		}
		switch m := matcher(l); {
		case m(reEvery) != nil:
			g := m(reEvery)
			n := 1
			if g[1] != "" {
				var ok bool
				if n, ok = numberWords[g[1]]; !ok {
					var err error
					if n, err = strconv.Atoi(g[1]); err != nil || n < 1 {
						return out, bad("expected a number of %ss", g[2])
					}
				}
			}
			freq := map[string]string{"second": "SECONDLY", "minute": "MINUTELY", "hour": "HOURLY", "day": "DAILY", "week": "WEEKLY"}[g[2]]
			out.Schedule = fmt.Sprintf("RRULE:FREQ=%s;INTERVAL=%d", freq, n)
		case m(reDailyAt) != nil:
			var hours, minutes []string
			for _, part := range reTimeSep.Split(m(reDailyAt)[1], -1) {
				c := reClock.FindStringSubmatch(strings.TrimSpace(part))
				if c == nil {
					return out, bad("expected times such as 6 AM, 4 PM or 14:30")
				}
				h, _ := strconv.Atoi(c[1])
				switch {
				case c[3] == "pm" && h < 12:
					h += 12
				case c[3] == "am" && h == 12:
					h = 0
				}
				mm := "0"
				if c[2] != "" {
					mm = strings.TrimLeft(c[2], "0")
					if mm == "" {
						mm = "0"
					}
				}
				if h > 23 || c[2] > "59" {
					return out, bad("%s is not a time of day", part)
				}
				hours, minutes = appendUnique(hours, strconv.Itoa(h)), appendUnique(minutes, mm)
			}
			if len(minutes) > 1 {
				return out, bad("all times must share their minutes (a schedule takes every hour x minute pair)")
			}
			out.Schedule = fmt.Sprintf("RRULE:FREQ=DAILY;BYHOUR=%s;BYMINUTE=%s;BYSECOND=0", strings.Join(hours, ","), minutes[0])
		case m(reAllow) != nil:
			d, err := wordsDuration(m(reAllow)[1])
			if err != nil {
				return out, bad("%v", err)
			}
			out.Policy.Timeout = Duration(d)
		case m(reOnFailure) != nil:
			g := m(reOnFailure)
			k, ok := ordinal(g[1])
			if !ok || k != len(delays)+1 {
				return out, bad("expected the %s failure next", ordinalName(len(delays)+1))
			}
			var d time.Duration
			if g[2] != "immediately" {
				var err error
				if d, err = wordsDuration(strings.TrimPrefix(g[2], "after ")); err != nil {
					return out, bad("%v", err)
				}
			}
			delays = append(delays, Duration(d))
			sawRetry = true
		case reMark.MatchString(line):
			g := reMark.FindStringSubmatch(line)
			if g[1] != "" {
				k, ok := ordinal(strings.ToLower(g[1]))
				if !ok || k != len(delays)+1 {
					return out, bad("the retries listed end with the %s failure", ordinalName(len(delays)+1))
				}
				out.Policy.OnExhausted = Disable
				sawRetry = true
			}
			out.Policy.FinalReason = strings.TrimSpace(strings.TrimRight(g[2], "."))
		case m(reFinalColon) != nil || m(reFinalDo) != nil:
			g := m(reFinalColon)
			if g == nil {
				g = m(reFinalDo)
				out.Policy.OnExhausted = Disable
			}
			k, ok := ordinal(g[1])
			if !ok || k != len(delays)+1 {
				return out, bad("the retries listed end with the %s failure", ordinalName(len(delays)+1))
			}
			sawRetry = true
		case m(rePanic) != nil || m(reStopAll) != nil:
			if !afterGiveUp {
				out.Policy.OnExhausted = Disable
				sawRetry = true
			}
		case m(reWaitNext) != nil:
			out.Policy.OnExhausted = WaitNext
		case m(reGiveUpAge) != nil:
			d, err := wordsDuration(m(reGiveUpAge)[1])
			if err != nil {
				return out, bad("%v", err)
			}
			out.Policy.GiveUpAfter = Duration(d)
			afterGiveUp = true
		case m(reNoRetry) != nil:
			sawRetry = true
		case m(reAlign) != nil:
			out.Policy.Align = true
		case m(reNoAlign) != nil:
			out.Policy.Align = false
		case m(reEmail) != nil:
			// bigtables sends no email itself: the record's disabled event
			// asks the notifier's consumers to tell the customer.
			out.Policy.NotifyFinal = true
		case m(reNote) != nil:
			out.Policy.Notes = appendUnique(out.Policy.Notes, strings.TrimSpace(reNote.FindStringSubmatch(line)[1]))
		case m(reSendJob) != nil:
			// What the worker does: kept for people, shown by explain.
			out.Policy.Notes = appendUnique(out.Policy.Notes, line)
		case m(reKindFinal) != nil:
			kind := reKindFinal.FindStringSubmatch(strings.Join(strings.Fields(line), " "))[1]
			if err := ValidateKind(kind); err != nil {
				return out, bad("%v", err)
			}
			if out.Policy.OnKind == nil {
				out.Policy.OnKind = map[string]KindRule{}
			}
			out.Policy.OnKind[kind] = KindRule{Final: true}
		case m(reKindAny) != nil:
			return out, bad("a failure kind's own strategy is not written as a sentence: give it in --policy, e.g. {\"on_kind\": {\"rate_limited\": {\"strategy\": {\"kind\": \"exponential\"}}}}")
		case m(reRetryAfter) != nil:
			d, err := wordsDuration(m(reRetryAfter)[1])
			if err != nil {
				return out, bad("%v", err)
			}
			out.Policy.MaxRetryAfter = Duration(d)
			if d == DefaultMaxRetryAfter {
				out.Policy.MaxRetryAfter = 0 // one spelling for one policy
			}
		case m(reSpread) != nil:
			d, err := wordsDuration(m(reSpread)[1])
			if err != nil {
				return out, bad("%v", err)
			}
			out.Policy.Spread = Duration(d)
		case reSendEvents.MatchString(line):
			out.Policy.Notify = reSendEvents.FindStringSubmatch(line)[1]
		case m(reHeader) != nil:
		default:
			return out, bad("not understood; expected sentences such as \"Refresh the model every 2 hours\", \"Allow 1 hour for a response\", \"On the first failure, retry immediately\", \"Panic\", \"Mark the record as 'thumbnail creation failed'\", \"Email the customer about the final failure\", or \"Note: ...\" for a sentence to keep as is")
		}
	}
	if sawRetry {
		out.Policy.SetStrategy(ListStrategy(delays...))
	}
	if err := out.Policy.Validate(); err != nil {
		return out, err
	}
	return out, nil
}

func matcher(l string) func(*regexp.Regexp) []string {
	return func(re *regexp.Regexp) []string { return re.FindStringSubmatch(l) }
}

func appendUnique(list []string, s string) []string {
	for _, v := range list {
		if v == s {
			return list
		}
	}
	return append(list, s)
}

// HumanDuration writes a duration in words: "immediately" for 0, else
// "1 hour 30 minutes", "5 minutes", "2.5 seconds".
func HumanDuration(d time.Duration) string {
	if d == 0 {
		return "immediately"
	}
	var parts []string
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{7 * 24 * time.Hour, "week"}, {24 * time.Hour, "day"}, {time.Hour, "hour"}, {time.Minute, "minute"}} {
		if n := d / u.d; n > 0 {
			parts = append(parts, plural(int64(n), u.name))
			d -= n * u.d
		}
	}
	if d > 0 {
		if d%time.Second == 0 {
			parts = append(parts, plural(int64(d/time.Second), "second"))
		} else {
			parts = append(parts, strconv.FormatFloat(d.Seconds(), 'f', -1, 64)+" seconds")
		}
	}
	return strings.Join(parts, " ")
}

func plural(n int64, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// Explain writes the schedule's rule (RRULE text, may be "") and the policy
// as sentences a person can review; for list strategies they read back
// through ParseReadable into the same policy. A sentence nested under the
// one before it starts with two spaces per level ("  Reset attempt_no").
// The sentences use no internal words: "After the last retry, stop
// refreshing until a person updates the record", not "Panic".
func Explain(rule string, p Policy) []string {
	const sub = "  "
	var out []string
	if s := explainRule(rule); s != "" {
		out = append(out, s)
	} else {
		out = append(out, "Refresh once (no schedule); after a success, wait for a manual update")
	}
	out = append(out, "Allow "+HumanDuration(time.Duration(p.Timeout))+" for a response")
	st := p.RetryStrategy()
	attempts := st.Attempts() // the failure that exhausts, 0 if only age ends it
	if st.Kind == KindList && st.Jitter == nil {
		for i, d := range st.Delays {
			if d == 0 {
				out = append(out, fmt.Sprintf("On the %s failure, retry immediately", ordinalName(i+1)))
			} else {
				out = append(out, fmt.Sprintf("On the %s failure, retry after %s", ordinalName(i+1), HumanDuration(time.Duration(d))))
			}
		}
	} else {
		out = append(out, explainStrategy(st))
	}
	switch {
	case p.OnExhausted == WaitNext && attempts > 0:
		out = append(out, fmt.Sprintf("On the %s failure:", ordinalName(attempts)), sub+"Reset attempt_no", sub+"Wait until next scheduled refresh")
	case p.OnExhausted == WaitNext:
		out = append(out, "When the retries run out: Reset attempt_no and wait until next scheduled refresh")
	case attempts > 0 && st.Kind == KindList && st.Jitter == nil:
		out = append(out, "After the last retry, stop refreshing until a person updates the record")
	case endless(st):
		out = append(out, "Retry until give_up_after ends it")
	default:
		out = append(out, "When the retries run out, stop refreshing until a person updates the record")
	}
	if p.GiveUpAfter > 0 {
		out = append(out, "Give up after "+HumanDuration(time.Duration(p.GiveUpAfter))+" of unsuccessful refresh attempts")
	}
	if p.Spread > 0 {
		// docs/design.md, U12.
		out = append(out, "Spread the planned refreshes over "+HumanDuration(time.Duration(p.Spread))+": each record keeps its own random offset")
	}
	for _, kind := range p.kindNames() {
		rule := p.OnKind[kind]
		if rule.Final || rule.Strategy == nil {
			out = append(out, fmt.Sprintf("If the worker reports a failure of kind %s, stop refreshing at once until a person updates the record", kind))
			continue
		}
		out = append(out, fmt.Sprintf("If the worker reports a failure of kind %s:", kind), sub+explainStrategy(*rule.Strategy))
	}
	if p.MaxRetryAfter > 0 && p.MaxRetryAfter != Duration(DefaultMaxRetryAfter) {
		out = append(out, "Honour a worker's retry_after up to "+HumanDuration(time.Duration(p.MaxRetryAfter)))
	}
	if !p.Align {
		out = append(out, "Do not align retries with the schedule")
	}
	if p.FinalReason != "" || p.NotifyFinal {
		out = append(out, "When the record is disabled:")
		if p.FinalReason != "" {
			out = append(out, sub+`Mark the record as "`+p.FinalReason+`"`)
		}
		if p.NotifyFinal {
			out = append(out, sub+"Email the customer about the final failure")
		}
	}
	if p.Notify != "" {
		out = append(out, "Send this record's events to "+p.Notify)
	}
	for _, n := range p.Notes {
		out = append(out, "Note: "+n)
	}
	return out
}

// explainStrategy describes a non-list strategy.
func explainStrategy(s Strategy) string {
	spec, ok := kindOf(s.Kind)
	if !ok {
		return "Retry by the strategy " + s.Kind // Validate refuses unknown kinds
	}
	line := spec.explain(s)
	if j := s.Jitter; j != nil {
		switch j.Kind {
		case JitterAdditive:
			f := j.Fraction
			if f == 0 {
				f = 0.25
			}
			line += fmt.Sprintf(", plus a random 0 to %v%% of it", f*100)
		case JitterFull:
			line += ", then a random delay from 0 to that (full jitter)"
		case JitterEqual:
			line += ", then half of it plus a random part of the other half (equal jitter)"
		case JitterDecorrelated:
			line += ", decorrelated: a random delay from the first delay to 3 × the previous one"
		}
	}
	if n := s.Attempts(); n > 0 {
		line += fmt.Sprintf("; the %s failure ends the retries", ordinalName(n))
	}
	return line
}

// explainRule describes simple rules in words and others verbatim.
func explainRule(rule string) string {
	if rule == "" {
		return ""
	}
	if _, after, ok := strings.Cut(rule, "RRULE:"); ok {
		rule = after
	}
	parts := map[string]string{}
	for _, p := range strings.Split(rule, ";") {
		if k, v, ok := strings.Cut(p, "="); ok {
			parts[k] = v
		}
	}
	interval := parts["INTERVAL"]
	if interval == "" {
		interval = "1"
	}
	unit := map[string]string{"SECONDLY": "second", "MINUTELY": "minute", "HOURLY": "hour", "DAILY": "day", "WEEKLY": "week"}[parts["FREQ"]]
	delete(parts, "FREQ")
	delete(parts, "INTERVAL")
	if unit != "" && len(parts) == 0 {
		if interval == "1" {
			return "Refresh the model every " + unit
		}
		return "Refresh the model every " + interval + " " + unit + "s"
	}
	if unit == "day" && interval == "1" && parts["BYHOUR"] != "" && len(parts) <= 3 &&
		(parts["BYSECOND"] == "" || parts["BYSECOND"] == "0") {
		var times []string
		minute, _ := strconv.Atoi(parts["BYMINUTE"])
		for _, h := range strings.Split(parts["BYHOUR"], ",") {
			hour, _ := strconv.Atoi(h)
			times = append(times, clock12(hour, minute))
		}
		count := map[int]string{1: "once", 2: "twice"}[len(times)]
		if count == "" {
			count = fmt.Sprintf("%d times", len(times))
		}
		return fmt.Sprintf("Refresh BigTable %s per day at %s", count, strings.Join(times, " and "))
	}
	return "Refresh on the schedule RRULE:" + rule
}

func clock12(h, m int) string {
	suffix := "AM"
	if h >= 12 {
		suffix = "PM"
	}
	h12 := h % 12
	if h12 == 0 {
		h12 = 12
	}
	if m == 0 {
		return fmt.Sprintf("%d %s", h12, suffix)
	}
	return fmt.Sprintf("%d:%02d %s", h12, m, suffix)
}
