package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bigtables/bigtables/internal/wait"
	"github.com/bigtables/bigtables/notifier"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/store"
)

// eventView is one event as events prints it: the documented event JSON
// and its delivery state.
type eventView struct {
	protocol.Event
	State     store.EventState `json:"state"`
	Tries     int              `json:"tries"`
	NextAt    *string          `json:"next_at,omitempty"`
	LastError string           `json:"last_error,omitempty"`
}

func viewOf(ev store.Event) eventView {
	var p protocol.Event
	_ = json.Unmarshal(notifier.Body(ev), &p) // our own JSON
	v := eventView{Event: p, State: ev.State, Tries: ev.Tries, LastError: ev.LastError}
	if ev.State == store.EventPending {
		v.NextAt = jsonTime(ev.NextAt)
	}
	return v
}

// followLookback is how far below the newest id shown events --follow
// looks again: ids are drawn before commit, so a transaction that commits
// late can add an id below one already shown.
const followLookback = 1000

func runEvents(ctx context.Context, e env, args []string) error {
	var cfg Config
	var uid, up, typ string
	var follow, dead, asJSON bool
	var limit int
	var every time.Duration
	fs := flagSet(e, "events", "events [--follow] [--uid U] [--upstream NAME] [--type T] [--dead] [--limit N] [--json] | events requeue ID", &cfg)
	fs.StringVar(&uid, "uid", "", "only this record's events (an upstream's breaker events belong to no record: see --upstream)")
	fs.StringVar(&up, "upstream", "", "only this upstream's breaker events (breaker_opened, breaker_half_open, breaker_closed)")
	fs.StringVar(&typ, "type", "", "only events of this type: "+typeNames())
	fs.BoolVar(&follow, "follow", false, "keep printing new events until interrupted")
	fs.BoolVar(&dead, "dead", false, "only dead events (their last delivery retry failed): requeue them with 'events requeue ID'")
	fs.IntVar(&limit, "limit", 50, "print the newest N events (1 to 10000)")
	fs.BoolVar(&asJSON, "json", false, "print JSON: an array, or with --follow one event per line")
	fs.DurationVar(&every, "interval", time.Second, "--follow: how often to look for new events")
	pos, err := parse(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		if pos[0] != "requeue" || len(pos) != 2 {
			return usagef("unexpected arguments %q: expected no argument, or requeue ID", strings.Join(pos, " "))
		}
		id, err := strconv.ParseInt(pos[1], 10, 64)
		if err != nil || id <= 0 {
			return usagef("requeue %q: expected an event id (a positive integer)", pos[1])
		}
		return cfg.withStore(ctx, func(st *store.Store) error {
			if err := st.RequeueEvent(ctx, id); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "requeued event %d: a notifier delivers it again\n", id)
			return nil
		})
	}
	if typ != "" && !store.EventType(typ).Known() {
		return usagef("--type %q: expected one of %s", typ, typeNames())
	}
	if limit < 1 || limit > 10000 || every <= 0 {
		return usagef("--limit must be from 1 to 10000 and --interval positive")
	}
	f := store.EventFilter{UID: uid, Upstream: up, Type: store.EventType(typ), Last: true, Limit: limit}
	if dead {
		f.State = store.EventDead
	}
	return cfg.withStore(ctx, func(st *store.Store) error {
		list, err := st.ListEvents(ctx, f)
		if err != nil {
			return err
		}
		if !follow {
			return printEvents(e, list, asJSON, true)
		}
		seen := map[int64]bool{}
		var last int64
		show := func(list []store.Event) error {
			var fresh []store.Event
			for _, ev := range list {
				if !seen[ev.ID] {
					seen[ev.ID] = true
					fresh = append(fresh, ev)
					last = max(last, ev.ID)
				}
			}
			for id := range seen {
				if id <= last-followLookback {
					delete(seen, id)
				}
			}
			return printEvents(e, fresh, asJSON, false)
		}
		if err := show(list); err != nil {
			return err
		}
		f.Last, f.Limit = false, 10000
		for {
			if wait.Sleep(ctx, every) != nil {
				return nil
			}
			f.After = max(last-followLookback, 0)
			list, err := st.ListEvents(ctx, f)
			if err != nil {
				return err
			}
			if err := show(list); err != nil {
				return err
			}
		}
	})
}

func typeNames() string {
	names := make([]string, len(store.EventTypes))
	for i, t := range store.EventTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// printEvents prints events as a table (with a header when header), a
// JSON array (header) or JSON lines.
func printEvents(e env, list []store.Event, asJSON, header bool) error {
	views := make([]eventView, len(list))
	for i, ev := range list {
		views[i] = viewOf(ev)
	}
	if asJSON {
		if header {
			return writeJSON(e, views)
		}
		enc := json.NewEncoder(e.stdout)
		for _, v := range views {
			if err := enc.Encode(v); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, "ID\tAT\tTYPE\tUID\tSTATE\tTRIES\tDETAIL")
	}
	for _, v := range views {
		who := v.BigTableUID
		if who == "" {
			who = "upstream " + v.Upstream
		}
		detail := v.Reason
		if v.LastError != "" {
			detail = strings.TrimSpace(detail + " (last error: " + v.LastError + ")")
		}
		if v.BigTableUID == "" && v.To != "" {
			detail = breakerDetail(v.Event)
		}
		if detail == "" {
			detail = v.Message
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", v.ID, v.At.UTC().Format(time.RFC3339), v.Type, who, v.State, v.Tries, oneLine(detail, 100))
	}
	return tw.Flush()
}

// breakerDetail is a breaker event's detail column: the move, why, and
// what follows.
func breakerDetail(ev protocol.Event) string {
	d := fmt.Sprintf("%s -> %s: %s", ev.From, ev.To, ev.Why)
	if ev.CoolDown != "" {
		d += "; cool-down " + ev.CoolDown
	}
	if ev.NextProbeAt != nil {
		d += ", probes at " + ev.NextProbeAt.UTC().Format(time.RFC3339)
	}
	if ev.Parked > 0 {
		d += fmt.Sprintf("; %d parked", ev.Parked)
	}
	return d
}
