package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// validUpstreamName checks an upstream name given by a person; empty is
// accepted only where it means "the host of the input URL".
func validUpstreamName(name string, emptyOK bool) error {
	switch {
	case name == "" && emptyOK:
		return nil
	case name == "":
		return fmt.Errorf("the name is empty")
	case len(name) > 300:
		return fmt.Errorf("name of %d bytes: at most 300", len(name))
	case strings.TrimSpace(name) != name || strings.ContainsAny(name, "\n\r\t"):
		return fmt.Errorf("name %q: no leading or trailing spaces, tabs or newlines", name)
	}
	return nil
}

// parseRate reads a rate: "5/s", "300/m", "2.5" (per second), "0" (no cap).
func parseRate(s string) (float64, error) {
	num, unit, _ := strings.Cut(strings.TrimSpace(s), "/")
	per := 1.0
	switch strings.TrimSpace(unit) {
	case "", "s", "sec", "second":
	case "m", "min", "minute":
		per = 60
	case "h", "hour":
		per = 3600
	default:
		return 0, fmt.Errorf("rate %q: expected starts per second or minute, e.g. 5/s or 300/m", s)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("rate %q: expected a number of starts, zero or more, e.g. 5/s or 300/m", s)
	}
	return v / per, nil
}

// parseBreaker applies a breaker spec to b: "off" (never opens), or
// key=value pairs separated by spaces or commas: consecutive=N,
// failure-rate=50% (or 0.5), min-volume=N, window=D, cool-down=D,
// max-cool-down=D, probes=N. A cool-down given without max-cool-down
// raises max-cool-down to 20 times the cool-down (at most 1 week) when it
// is below twice the cool-down, so that the cool-down still doubles after
// failed probes, as the default's 30s to 10m does.
func parseBreaker(spec string, b *upstream.Breaker) error {
	if strings.TrimSpace(spec) == "off" {
		b.Consecutive, b.FailureRate = 0, 0
		return nil
	}
	fields := strings.FieldsFunc(spec, func(r rune) bool { return r == ' ' || r == ',' })
	given := map[string]bool{}
	if len(fields) == 0 {
		return fmt.Errorf("empty: expected off, or e.g. \"consecutive=5 failure-rate=50%% min-volume=20 window=1m cool-down=30s max-cool-down=10m probes=2\"")
	}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("%q: expected key=value", f)
		}
		var err error
		switch k {
		case "consecutive":
			b.Consecutive, err = strconv.Atoi(v)
		case "min-volume":
			b.MinVolume, err = strconv.Atoi(v)
		case "probes":
			b.Probes, err = strconv.Atoi(v)
		case "failure-rate":
			pct := strings.HasSuffix(v, "%")
			b.FailureRate, err = strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
			if pct {
				b.FailureRate /= 100
			}
		case "window", "cool-down", "max-cool-down":
			var d time.Duration
			d, err = refresh.ParseDuration(v)
			*map[string]*refresh.Duration{"window": &b.Window, "cool-down": &b.CoolDown, "max-cool-down": &b.MaxCoolDown}[k] = refresh.Duration(d)
		default:
			return fmt.Errorf("unknown key %q: expected consecutive, failure-rate, min-volume, window, cool-down, max-cool-down or probes", k)
		}
		if err != nil {
			return fmt.Errorf("%s=%s: %v", k, v, err)
		}
		given[k] = true
	}
	if given["cool-down"] && !given["max-cool-down"] && b.MaxCoolDown < 2*b.CoolDown {
		b.MaxCoolDown = min(20*b.CoolDown, refresh.Duration(7*24*time.Hour))
	}
	return nil
}

func runUpstream(ctx context.Context, e env, args []string) error {
	var cfg Config
	var maxInFlight int
	var rate, burst, release, breaker string
	fs := flagSet(e, "upstream", "upstream set NAME [--max-in-flight N] [--rate R/s] [--burst N] [--release-rate R/s] [--breaker SPEC]", &cfg)
	fs.IntVar(&maxInFlight, "max-in-flight", 0, "most attempts (`N`) running for this upstream across all schedulers; 0: no cap")
	fs.StringVar(&rate, "rate", "", "most starts per second, smoothed (`R/s`): 5/s, 300/m; 0: no cap")
	fs.StringVar(&burst, "burst", "", "starts allowed at once (`N`) after a quiet spell (default: the rate, at least 1)")
	fs.StringVar(&release, "release-rate", "", "parked records released per second (`R/s`) after the breaker closes (default: the rate, or 10/s)")
	fs.StringVar(&breaker, "breaker", "", "`SPEC`: off, or e.g. \"consecutive=5 failure-rate=50% min-volume=20 window=1m cool-down=30s max-cool-down=10m probes=2\" (keys not given are kept)")
	switch {
	case len(args) > 0 && args[0] == "set":
		args = args[1:]
	case len(args) > 0 && strings.HasPrefix(args[0], "-"): // -h and flags print the usage
		if _, err := parse(fs, args, 1); err != nil {
			return err
		}
		fallthrough
	default:
		return usagef("expected: upstream set NAME [--max-in-flight N] [--rate R/s] [--burst N] [--release-rate R/s] [--breaker SPEC]")
	}
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	name := pos[0]
	if err := validUpstreamName(name, false); err != nil {
		return usagef("upstream set: %v", err)
	}
	set := setFlags(fs)
	return cfg.withStore(ctx, func(st *store.Store) error {
		c := upstream.DefaultConfig()
		list, err := st.Upstreams(ctx)
		if err != nil {
			return err
		}
		for _, u := range list {
			if u.Name == name {
				c = u.Config
			}
		}
		if set["max-in-flight"] {
			c.MaxInFlight = maxInFlight
		}
		for _, f := range []struct {
			name, value string
			dst         *float64
		}{{"rate", rate, &c.Rate}, {"burst", burst, &c.Burst}, {"release-rate", release, &c.ReleaseRate}} {
			if !set[f.name] {
				continue
			}
			if *f.dst, err = parseRate(f.value); err != nil {
				return usagef("--%s: %v", f.name, err)
			}
		}
		if set["breaker"] {
			if err := parseBreaker(breaker, &c.Breaker); err != nil {
				return usagef("--breaker: %v", err)
			}
		}
		if err := c.Validate(); err != nil {
			return usageError{err.Error()}
		}
		if err := st.SetUpstream(ctx, name, c); err != nil {
			return err
		}
		return writeJSON(e, upstreamJSON(store.UpstreamRow{Upstream: upstream.Upstream{Name: name, Config: c}, Configured: true}))
	})
}

// upstreamView is an upstream as upstreams --json prints it.
type upstreamView struct {
	Name           string          `json:"name"`
	Configured     bool            `json:"configured"`
	Config         upstream.Config `json:"config"`
	Breaker        string          `json:"breaker"`
	FailuresInRow  int             `json:"failures_in_row"`
	WindowFailures int             `json:"window_failures"`
	InFlight       int             `json:"in_flight"`
	Parked         int64           `json:"parked"`
	NextProbe      *string         `json:"next_probe"`
	ChangedAt      *string         `json:"changed_at"`
}

func upstreamJSON(u store.UpstreamRow) upstreamView {
	return upstreamView{Name: u.Name, Configured: u.Configured, Config: u.Config, Breaker: string(u.State.Current()),
		FailuresInRow: u.State.Failures, WindowFailures: u.WindowFailures, InFlight: u.InFlight, Parked: u.Parked,
		NextProbe: jsonTime(u.State.NextProbe), ChangedAt: jsonTime(u.State.ChangedAt)}
}

func runUpstreams(ctx context.Context, e env, args []string) error {
	var cfg Config
	var asJSON bool
	fs := flagSet(e, "upstreams", "upstreams [--json]", &cfg)
	fs.BoolVar(&asJSON, "json", false, "print a JSON array")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	return cfg.withStore(ctx, func(st *store.Store) error {
		list, err := st.Upstreams(ctx)
		if err != nil {
			return err
		}
		views := make([]upstreamView, 0, len(list))
		for _, u := range list {
			views = append(views, upstreamJSON(u))
		}
		if asJSON {
			return writeJSON(e, views)
		}
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tBREAKER\tFAILURES\tIN_FLIGHT\tPARKED\tNEXT_PROBE\tMAX_IN_FLIGHT\tRATE")
		for _, v := range views {
			next := "-"
			if v.NextProbe != nil {
				next = *v.NextProbe
			}
			limit, rate := "-", "-"
			if v.Config.MaxInFlight > 0 {
				limit = strconv.Itoa(v.Config.MaxInFlight)
			}
			if v.Config.Rate > 0 {
				rate = strconv.FormatFloat(v.Config.Rate, 'g', -1, 64) + "/s"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", v.Name, v.Breaker, v.WindowFailures, v.InFlight, v.Parked, next, limit, rate)
		}
		return tw.Flush()
	})
}
