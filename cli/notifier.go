package cli

import (
	"context"
	"strings"
	"time"

	"github.com/bigtables/bigtables/notifier"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func runNotifier(ctx context.Context, e env, args []string) error {
	var cfg Config
	var nc notifier.Config
	var webhooks, allow listFlag
	var retry string
	fs := flagSet(e, "notifier", "notifier [--webhook URL]... [--allow-host H]... [--events-list NAME] [--retry STRATEGY] [--keep D]", &cfg)
	fs.Var(&webhooks, "webhook", "POST every event to URL (repeatable)")
	fs.Var(&allow, "allow-host", "a record's own notify URL may name this host, or *.domain for its subdomains (repeatable; none: every record's URL is refused)")
	fs.StringVar(&nc.Secret, "webhook-secret", "", "sign webhook bodies with HMAC-SHA256 (header X-Bigtables-Signature-256); prefer env BIGTABLES_WEBHOOK_SECRET, which ps does not show")
	fs.StringVar(&nc.EventsList, "events-list", e.get("BIGTABLES_EVENTS_LIST", ""), "also append every event to this Redis list, e.g. "+queue.DefaultEventsList+" (env BIGTABLES_EVENTS_LIST; empty: none)")
	fs.StringVar(&retry, "retry", notifier.DefaultRetry, "delays between delivery rounds, as a retry strategy (bigtables plan --strategy syntax); after the last, the event is dead")
	fs.DurationVar(&nc.Timeout, "timeout", notifier.DefaultTimeout, "timeout of one webhook call")
	fs.DurationVar(&nc.Lease, "lease", 0, "a claimed event is left to other notifiers after this long (default: twice the longest round, at least 1m)")
	fs.IntVar(&nc.Batch, "batch", notifier.DefaultBatch, "events claimed and delivered at once")
	fs.DurationVar(&nc.Keep, "keep", notifier.DefaultKeep, "delivered and dead events older than this are pruned")
	fs.StringVar(&nc.ID, "id", "", "name of this notifier in its claims (default: host-pid-random)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if nc.Secret == "" {
		nc.Secret = e.getenv("BIGTABLES_WEBHOOK_SECRET")
	}
	nc.Webhooks, nc.AllowHosts = webhooks, allow
	if len(webhooks) == 0 && nc.EventsList == "" && len(allow) == 0 {
		return usagef("nothing to deliver to: give --webhook, --events-list or --allow-host (for records' own URLs)")
	}
	if nc.Timeout <= 0 || nc.Batch < 1 || nc.Batch > 1000 || nc.Keep < time.Hour || nc.Lease < 0 {
		return usagef("--timeout must be positive, --batch from 1 to 1000, --keep at least 1h, --lease 0 or more")
	}
	strategy, err := refresh.ParseStrategy(retry)
	if err != nil {
		return usagef("--retry: %v", err)
	}
	nc.Retry = &strategy
	pre := nc
	pre.EventsList = "" // checked once Redis answers
	// Refuse bad flags before any waiting.
	if _, err := notifier.New(nil, pre); err != nil {
		return usagef("%v", err)
	}
	log, err := cfg.startProcess(e)
	if err != nil {
		return err
	}
	nc.Logger = log
	run := func(st *store.Store, q *queue.Queue) error {
		if nc.EventsList != "" {
			if err := q.ValidateEvents(nc.EventsList); err != nil {
				return usagef("--events-list: %v", err)
			}
			nc.Queue = q
		}
		n, err := notifier.New(st, nc)
		if err != nil {
			return err
		}
		return n.Run(ctx)
	}
	if nc.EventsList != "" {
		return cfg.runProcess(ctx, e, log, true, run)
	}
	st, err := cfg.awaitStore(ctx, e, log)
	if err != nil {
		return stoppedIsClean(log, err)
	}
	defer st.Close()
	return run(st, nil)
}
