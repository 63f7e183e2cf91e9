package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

// tellCancelled marks a cancelled attempt so that its worker can stop:
// best effort, its results are stale anyway.
func tellCancelled(ctx context.Context, e env, cfg Config, cmd string, c *store.Cancelled) {
	if c == nil {
		return
	}
	err := cfg.withQueue(ctx, func(q *queue.Queue) error {
		return q.Cancel(ctx, map[string]time.Time{c.AttemptUID: c.DeadlineAt})
	})
	if err != nil {
		fmt.Fprintf(e.stderr, "bigtables %s: warning: could not tell the worker of attempt %s to stop: %v\n", cmd, c.AttemptUID, err)
	}
}

func runDelete(ctx context.Context, e env, args []string) error {
	var cfg Config
	fs := flagSet(e, "delete", "delete U", &cfg)
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	var gone *store.Cancelled
	if err := cfg.withStore(ctx, func(st *store.Store) error {
		gone, err = st.Delete(ctx, pos[0])
		return err
	}); err != nil {
		return err
	}
	tellCancelled(ctx, e, cfg, "delete", gone)
	if gone != nil {
		fmt.Fprintf(e.stdout, "deleted %s and its history; its running attempt %s was cancelled\n", pos[0], gone.AttemptUID)
	} else {
		fmt.Fprintf(e.stdout, "deleted %s and its history\n", pos[0])
	}
	return nil
}

func runPause(ctx context.Context, e env, args []string) error {
	var cfg Config
	fs := flagSet(e, "pause", "pause U", &cfg)
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	var row store.Row
	var gone *store.Cancelled
	if err := cfg.withStore(ctx, func(st *store.Store) error {
		row, gone, err = st.Pause(ctx, pos[0])
		return err
	}); err != nil {
		return err
	}
	tellCancelled(ctx, e, cfg, "pause", gone)
	return writeJSON(e, recordJSON(row, nil))
}

func runResume(ctx context.Context, e env, args []string) error {
	var cfg Config
	fs := flagSet(e, "resume", "resume U", &cfg)
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	return cfg.withStore(ctx, func(st *store.Store) error {
		row, err := st.Resume(ctx, pos[0])
		if err != nil {
			return err
		}
		return writeJSON(e, recordJSON(row, nil))
	})
}

func runRun(ctx context.Context, e env, args []string) error {
	var cfg Config
	fs := flagSet(e, "run", "run U", &cfg)
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	return cfg.withStore(ctx, func(st *store.Store) error {
		row, err := st.RunNow(ctx, pos[0])
		if err != nil {
			return err
		}
		return writeJSON(e, recordJSON(row, nil))
	})
}

// deadView is one dead letter as dead list prints it.
type deadView struct {
	Index  int64           `json:"index"`
	Reason string          `json:"reason"`
	DeadAt *string         `json:"dead_at"`
	Raw    string          `json:"raw"`
	Stored json.RawMessage `json:"stored,omitempty"` // an entry that is not an envelope, as stored
}

func runDead(ctx context.Context, e env, args []string) error {
	var cfg Config
	var limit int64
	var start int64
	var asJSON, yes bool
	fs := flagSet(e, "dead", "dead list|requeue|purge [--limit N] [--start N] [--json] [--yes]", &cfg)
	fs.Int64Var(&limit, "limit", 100, "list: at most N letters; requeue, purge: at most N, oldest first (0: all)")
	fs.Int64Var(&start, "start", 0, "list: from this position (0: the oldest)")
	fs.BoolVar(&asJSON, "json", false, "list: print a JSON array")
	fs.BoolVar(&yes, "yes", false, "purge: really delete")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if limit < 0 || start < 0 {
		return usagef("--limit and --start must be 0 or more")
	}
	return cfg.withQueue(ctx, func(q *queue.Queue) error {
		d, err := q.Depths(ctx)
		if err != nil {
			return err
		}
		all := limit
		if all == 0 {
			all = d.Dead
		}
		switch pos[0] {
		case "list":
			if limit == 0 {
				limit = d.Dead
			}
			list, err := q.DeadLetters(ctx, start, limit)
			if err != nil {
				return err
			}
			views := make([]deadView, 0, len(list))
			for i, v := range list {
				var dl protocol.DeadLetter
				dv := deadView{Index: start + int64(i)}
				if json.Unmarshal([]byte(v), &dl) == nil && dl.Raw != "" {
					dv.Reason, dv.DeadAt, dv.Raw = dl.Reason, jsonTime(dl.DeadAt), dl.Raw
				} else {
					dv.Reason = "(not a dead-letter envelope)"
					dv.Raw = v
				}
				views = append(views, dv)
			}
			if asJSON {
				return writeJSON(e, views)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "INDEX\tDEAD_AT\tREASON\tRAW")
			for _, v := range views {
				at := "-"
				if v.DeadAt != nil {
					at = *v.DeadAt
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", v.Index, at, oneLine(v.Reason, 80), oneLine(v.Raw, 80))
			}
			tw.Flush()
			fmt.Fprintf(e.stdout, "%d of %d dead letters shown\n", len(views), d.Dead)
			return nil
		case "requeue":
			n, err := q.Requeue(ctx, all)
			fmt.Fprintf(e.stdout, "requeued %d dead letters onto %s\n", n, q.Names().Output)
			return err
		case "purge":
			if !yes {
				return usagef("purge deletes %d dead letters for good: add --yes", min(all, d.Dead))
			}
			n, err := q.Purge(ctx, all)
			fmt.Fprintf(e.stdout, "purged %d dead letters\n", n)
			return err
		}
		return usagef("unknown action %q: expected list, requeue or purge", pos[0])
	})
}

// oneLine shortens s to n runes on one line, for tables.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// statsView is what stats --json prints.
type statsView struct {
	Records struct {
		Total      int64            `json:"total"`
		TotalExact bool             `json:"total_exact"`
		Phases     map[string]int64 `json:"phases"`
		Failing    int64            `json:"failing"`
		Due        int64            `json:"due"`
		DueLagSec  float64          `json:"due_lag_seconds"`
	} `json:"records"`
	Queues       map[string]int64 `json:"queues"`
	PollersAlive int              `json:"pollers_alive"`
}

func runStats(ctx context.Context, e env, args []string) error {
	var cfg Config
	var asJSON bool
	fs := flagSet(e, "stats", "stats [--json]", &cfg)
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	var v statsView
	err := cfg.withStore(ctx, func(st *store.Store) error {
		o, err := st.Overview(ctx)
		if err != nil {
			return err
		}
		v.Records.Total, v.Records.TotalExact, v.Records.Failing, v.Records.Due = o.Total, o.TotalExact, o.Failing, o.Due
		v.Records.DueLagSec = o.DueLag.Seconds()
		v.Records.Phases = map[string]int64{}
		for p, n := range o.Phases {
			v.Records.Phases[string(p)] = n
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = cfg.withQueue(ctx, func(q *queue.Queue) error {
		d, err := q.Depths(ctx)
		if err != nil {
			return err
		}
		v.Queues = map[string]int64{"input": d.Input, "output": d.Output, "dead": d.Dead, "processing": d.Processing}
		v.PollersAlive, err = q.PollersAlive(ctx, time.Now())
		return err
	})
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(e, v)
	}
	est := "estimated"
	if v.Records.TotalExact {
		est = "exact"
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "records\t%d\t(%s)\n", v.Records.Total, est)
	for _, p := range store.Phases {
		note := ""
		if p == refresh.PhaseWaiting && !v.Records.TotalExact {
			note = "(estimated: total less the others)"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", p, v.Records.Phases[string(p)], note)
	}
	fmt.Fprintf(tw, "failing\t%d\t(failed since their last success)\n", v.Records.Failing)
	fmt.Fprintf(tw, "due\t%d\t(oldest %s late)\n", v.Records.Due, time.Duration(v.Records.DueLagSec*float64(time.Second)).Round(time.Millisecond))
	for _, name := range []string{"input", "output", "processing", "dead"} {
		fmt.Fprintf(tw, "queue %s\t%d\t\n", name, v.Queues[name])
	}
	fmt.Fprintf(tw, "pollers alive\t%d\t\n", v.PollersAlive)
	return tw.Flush()
}

// buildInfo is what version prints, from the binary's build information.
func buildInfo() (version, revision, vcsTime string, modified bool) {
	version, revision, vcsTime = "(unknown)", "(unknown)", ""
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	if bi.Main.Version != "" {
		version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.time":
			vcsTime = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	return
}

func runVersion(ctx context.Context, e env, args []string) error {
	var cfg Config
	fs := flagSet(e, "version", "version", &cfg)
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	version, revision, vcsTime, modified := buildInfo()
	line := fmt.Sprintf("bigtables %s revision %s", version, revision)
	if vcsTime != "" {
		line += " (" + vcsTime + ")"
	}
	if modified {
		line += " with local changes"
	}
	fmt.Fprintln(e.stdout, line)
	return nil
}

// commandNames are the commands' names, for completion (filled in by init:
// the table refers to runCompletion).
var commandNames []string

func init() {
	for _, c := range commands {
		commandNames = append(commandNames, c.name)
	}
}

func runCompletion(ctx context.Context, e env, args []string) error {
	var cfg Config
	fs := flagSet(e, "completion", "completion bash|zsh   (e.g. source <(bigtables completion bash))", &cfg)
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	words := strings.Join(commandNames, " ")
	// Flags come from the command's own -h at completion time, so they
	// never drift from the binary.
	const flags = `bigtables "$cmd" -h 2>/dev/null | sed -n 's/^  -\([a-z-]*\).*/--\1/p'`
	switch pos[0] {
	case "bash":
		fmt.Fprintf(e.stdout, `# bigtables completion for bash: source <(bigtables completion bash)
_bigtables() {
    local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]}
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "%s" -- "$cur"))
    elif [ "$cmd" = dead ] && [ "$COMP_CWORD" -eq 2 ]; then
        COMPREPLY=($(compgen -W "list requeue purge" -- "$cur"))
    elif [ "$cmd" = completion ]; then
        COMPREPLY=($(compgen -W "bash zsh" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$(%s)" -- "$cur"))
    fi
}
complete -o default -F _bigtables bigtables
`, words, flags)
	case "zsh":
		fmt.Fprintf(e.stdout, `#compdef bigtables
# bigtables completion for zsh: source <(bigtables completion zsh)
_bigtables() {
    local cmd=${words[2]}
    if (( CURRENT == 2 )); then
        compadd -- %s
    elif [[ $cmd == dead ]] && (( CURRENT == 3 )); then
        compadd -- list requeue purge
    elif [[ $cmd == completion ]]; then
        compadd -- bash zsh
    else
        compadd -- $(%s)
        _files
    fi
}
compdef _bigtables bigtables
`, words, flags)
	default:
		return usagef("unknown shell %q: expected bash or zsh", pos[0])
	}
	return nil
}
