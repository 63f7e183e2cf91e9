// Package poller applies workers' results. It drains the output list in
// atomic batches into its own processing list (which a crash cannot lose: a
// live poller adopts the batch of one whose lease lapsed), applies every
// valid result of a batch in one database transaction, and only then
// acknowledges the batch, with the token it was drained with. A result whose
// attempt is no longer the record's, or that reached the output list after
// the attempt's deadline (judged by Redis's time, not by when it is applied),
// is stale: counted and discarded. A result that cannot be applied
// (malformed, oversized, unknown record, refused by the database) goes to the
// dead-letter list with its reason; it never holds up the others.
package poller

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/bigtables/bigtables/internal/wait"
	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/queue"
	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
	"github.com/bigtables/bigtables/upstream"
)

// Config tunes a Poller. Zero values take the defaults.
type Config struct {
	// ID names this poller's processing list; default a random id. Reusing
	// the id of a killed poller makes it process that poller's batch first;
	// an id held by the live lease of another process is refused.
	ID string
	// Batch is the most results applied in one transaction. Default 1000,
	// at most queue.MaxBatch. A batch is held in memory: at most Batch
	// results of at most MaxResultBytes each (64 MiB at the defaults; a
	// few hundred KiB for typical results).
	Batch int
	// MaxResultBytes is the largest result accepted; larger ones are
	// dead-lettered. Default protocol.DefaultMaxResultBytes.
	MaxResultBytes int
	// Idle is the pause when the output list is empty. Default 200ms.
	Idle time.Duration
	// Lease is how long this poller counts as alive after a heartbeat; a
	// poller silent for longer has its unacknowledged batch adopted by
	// another. Default 15s.
	Lease time.Duration
	// TxTimeout bounds how long a batch's transaction may wait for a lock,
	// run one statement, or sit idle holding its locks (a frozen process):
	// the database then ends it, before the lease lapses. Default and
	// maximum Lease/3.
	TxTimeout time.Duration
	// MaxResultWait bounds how long after an attempt's deadline a result
	// that reached the output list in time may still be applied: one
	// drained later is stale. The scheduler waits as long before it times
	// out an attempt whose result may still be waiting. Default
	// refresh.DefaultMaxResultWait (1h).
	MaxResultWait time.Duration
	// DeadCap caps the dead-letter list: the oldest dead letters beyond it
	// are dropped and counted. Default 100,000; negative means no cap.
	DeadCap int
	// MaxBackoff caps the pause after consecutive errors. Default 30s.
	MaxBackoff time.Duration
	// Logger: a line per batch at Debug, a summary every minute and every
	// error at Info/Error. Default slog.Default().
	Logger *slog.Logger
	// Draw returns uniform random numbers in [0, 1) for randomized retry
	// strategies. Default math/rand/v2's Float64.
	Draw func() float64
	// Observer, if set, is told what every batch and every round of Run
	// did (metrics, health).
	Observer Observer
}

// Observer is told what the poller did. Its methods must not block.
type Observer interface {
	// ObserveResults is called once a batch is acknowledged (and for
	// oversized results dead-lettered by the drain itself).
	ObserveResults(BatchCounts)
	// ObserveRound is called after each round of Run's loop: how many
	// results it handled (0: the output list was empty), how long it
	// took and its error (nil on success).
	ObserveRound(results int, took time.Duration, err error)
}

// Result outcomes, as BatchCounts reports them.
const (
	OutcomeApplied = "applied" // the result changed its record
	OutcomeStale   = "stale"   // the result's attempt is not the record's: discarded
	OutcomeDead    = "dead"    // the result went to the dead-letter list
)

// TypeInvalid is the result type BatchCounts reports for results that
// could not be decoded (their type is unknown).
const TypeInvalid = "invalid"

// ResultKind is a result's type (success, failure, status, or TypeInvalid)
// and what became of it (an Outcome* constant).
type ResultKind struct{ Type, Outcome string }

// BatchCounts is what became of a batch's results.
type BatchCounts struct {
	Results map[ResultKind]int
	// Disabled counts records a final failure disabled.
	Disabled int
	// BreakerTransitions counts the transitions of the upstreams' breakers
	// the batch's results made, by the state they went to.
	BreakerTransitions map[upstream.BreakerState]int
}

// DefaultDeadCap is the default cap of the dead-letter list.
const DefaultDeadCap = 100_000

func (c Config) withDefaults() Config {
	if c.ID == "" {
		c.ID = newID()
	}
	if c.Batch <= 0 {
		c.Batch = 1000
	}
	c.Batch = min(c.Batch, queue.MaxBatch)
	if c.MaxResultBytes <= 0 {
		c.MaxResultBytes = protocol.DefaultMaxResultBytes
	}
	if c.Idle <= 0 {
		c.Idle = 200 * time.Millisecond
	}
	if c.Lease <= 0 {
		c.Lease = 15 * time.Second
	}
	if c.TxTimeout <= 0 || c.TxTimeout > c.Lease/3 {
		c.TxTimeout = c.Lease / 3
	}
	if c.MaxResultWait <= 0 {
		c.MaxResultWait = refresh.DefaultMaxResultWait
	}
	if c.DeadCap == 0 {
		c.DeadCap = DefaultDeadCap
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Draw == nil {
		c.Draw = mrand.Float64
	}
	return c
}

// Stats counts what the poller did since it was created. A result is
// counted when what it did is durable: applied and stale when their
// transaction commits, dead when the acknowledgement that pushes the dead
// letter succeeds. A batch replayed after a crash counts its results again
// (as stale).
type Stats struct {
	Applied int64 // results that changed a record
	// Stale counts results for an attempt that is not the record's, that
	// reached the output list after its deadline, or progress reports older
	// than the record's (discarded).
	Stale int64
	Dead  int64 // results moved to the dead-letter list
	// HandedBack counts results handed back to the output list because
	// another transaction held their record; they are counted again when
	// a later batch applies them.
	HandedBack int64
	Batches    int64 // batches acknowledged
	// LostAcks counts batches whose acknowledgement found another poller
	// had adopted them (this one's lease lapsed): nothing was acknowledged,
	// and the adopter replays them.
	LostAcks int64
	// DeadDropped counts old dead letters this poller dropped over the cap.
	DeadDropped int64
}

// Poller drains and applies results.
type Poller struct {
	store *store.Store
	queue *queue.Queue
	cfg   Config
	lease queue.Lease
	rules *refresh.RulesCache
	log   *slog.Logger

	applied, stale, dead, handedBack, batches, lostAcks, dropped atomic.Int64

	// hooks let tests stop a batch at chosen points; nil in production.
	hooks struct {
		inTx      func() // in the transaction, after its writes, before the commit
		beforeAck func() error
	}
}

// New returns a Poller.
func New(st *store.Store, q *queue.Queue, cfg Config) *Poller {
	cfg = cfg.withDefaults()
	return &Poller{store: st, queue: q, cfg: cfg, rules: refresh.NewRulesCache(0),
		lease: queue.Lease{ID: cfg.ID, Instance: newID(), TTL: cfg.Lease},
		log:   cfg.Logger.With("poller", cfg.ID)}
}

// Stats returns the counters so far.
func (p *Poller) Stats() Stats {
	return Stats{Applied: p.applied.Load(), Stale: p.stale.Load(), Dead: p.dead.Load(), HandedBack: p.handedBack.Load(),
		Batches: p.batches.Load(), LostAcks: p.lostAcks.Load(), DeadDropped: p.dropped.Load()}
}

// ID returns the poller's id.
func (p *Poller) ID() string { return p.cfg.ID }

// Once processes what this poller has pending from before (a failed batch,
// a restart with the same id, or a batch it adopted), or else drains and
// processes one batch. It returns how many results it handled (applied,
// stale or dead; not those handed back); 0 means there was nothing to do.
func (p *Poller) Once(ctx context.Context) (int, error) {
	b, err := p.queue.Drain(ctx, p.lease, queue.DrainOptions{Max: p.cfg.Batch, MaxBytes: p.cfg.MaxResultBytes, DeadCap: p.cfg.DeadCap})
	if err != nil {
		return 0, err
	}
	p.countDropped(b.Dropped)
	if b.Oversized > 0 {
		p.dead.Add(int64(b.Oversized))
		if p.cfg.Observer != nil {
			p.cfg.Observer.ObserveResults(BatchCounts{Results: map[ResultKind]int{{TypeInvalid, OutcomeDead}: b.Oversized}})
		}
		p.log.Warn("oversized results dead-lettered", "count", b.Oversized, "limit_bytes", p.cfg.MaxResultBytes)
	}
	if len(b.Results) == 0 {
		return b.Oversized, nil
	}
	n, err := p.process(ctx, b)
	return b.Oversized + n, err
}

func (p *Poller) countDropped(n int64) {
	if n > 0 {
		p.dropped.Add(n)
		p.log.Warn("dead-letter list over its cap: oldest dead letters dropped", "dropped", n, "cap", p.cfg.DeadCap)
	}
}

// process applies one batch and acknowledges it. On error nothing is
// acknowledged: the batch stays in the processing list and is tried again
// (parts already committed are then stale).
func (p *Poller) process(ctx context.Context, b queue.Batch) (int, error) {
	rcv := refresh.Received{After: b.After, By: b.DrainedAt, MaxWait: p.cfg.MaxResultWait}
	var done batchPlan
	items := make([]item, 0, len(b.Results))
	for i, v := range b.Results {
		r, err := protocol.DecodeResult([]byte(v), p.cfg.MaxResultBytes)
		if err != nil {
			done.dead = append(done.dead, rejected{v, err.Error(), TypeInvalid})
			continue
		}
		items = append(items, item{idx: i, raw: v, res: r})
	}
	if err := p.apply(ctx, items, rcv, &done); err != nil {
		return 0, fmt.Errorf("apply batch of %d results: %w", len(b.Results), err)
	}
	// Committed. A crash before this acknowledgement replays the batch, whose
	// results are then stale: nothing is applied twice.
	if p.hooks.beforeAck != nil {
		if err := p.hooks.beforeAck(); err != nil {
			return 0, err
		}
	}
	ack := queue.Ack{Token: b.Token, HandBack: done.handBack, DeadCap: p.cfg.DeadCap}
	deadAt := time.Now().UTC()
	for _, d := range done.dead {
		ack.Dead = append(ack.Dead, protocol.DeadLetter{Reason: d.reason, DeadAt: deadAt, Raw: d.raw})
	}
	ackCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	res, err := p.queue.Ack(ackCtx, p.cfg.ID, ack)
	if err != nil {
		return 0, err
	}
	if !res.Acked {
		p.lostAcks.Add(1)
		p.log.Warn("batch not acknowledged: this poller's lease lapsed and another poller adopted the batch, which it replays",
			"results", len(b.Results), "dead_letters_left_to_the_adopter", len(ack.Dead))
		return len(b.Results) - len(done.handBack), nil
	}
	p.countDropped(res.Dropped)
	for _, d := range ack.Dead {
		p.log.Warn("result dead-lettered", "reason", d.Reason, "bytes", len(d.Raw))
	}
	if len(done.handBack) > 0 {
		p.log.Info("results handed back: another transaction holds their records", "results", len(done.handBack))
	}
	p.dead.Add(int64(len(ack.Dead)))
	p.handedBack.Add(int64(len(done.handBack)))
	p.batches.Add(1)
	if p.cfg.Observer != nil {
		p.cfg.Observer.ObserveResults(done.counts())
	}
	p.log.Debug("batch applied", "results", len(b.Results), "applied", done.applied, "stale", len(done.stale),
		"dead", len(ack.Dead), "handed_back", len(done.handBack))
	return len(b.Results) - len(done.handBack), nil
}

// logEnded logs, at Debug, each attempt a committed plan ended: its
// outcome, the failure branch taken and what the record does next, so that
// a log shows every transition (README, "Two commands": `make run` points
// at these fields).
func (p *Poller) logEnded(plan batchPlan) {
	if !p.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	rows := make(map[string]*store.Row, len(plan.save))
	for i := range plan.save {
		rows[plan.save[i].UID] = &plan.save[i]
	}
	for _, a := range plan.finished {
		args := []any{"uid", a.UID, "attempt_no", a.AttemptNo, "outcome", a.Outcome, "decision", a.Decision}
		if r := rows[a.UID]; r != nil {
			args = append(args, "refresh_at", r.RefreshAt)
			if r.Disabled {
				args = append(args, "disabled", true, "reason", r.DisabledReason)
			}
		}
		p.log.Debug("attempt ended", args...)
	}
}

// apply applies the items in one transaction and adds its plan to done. If
// the database refuses a value (a data or constraint error: retrying the
// same values cannot help), it splits the items in two and applies each half
// alone, down to the one result to blame, which it dead-letters with the
// database's reason: one bad result never blocks the others. Any other error
// (an outage) is returned.
func (p *Poller) apply(ctx context.Context, items []item, rcv refresh.Received, done *batchPlan) error {
	if len(items) == 0 {
		return nil
	}
	plan, err := p.applyTx(ctx, items, rcv)
	if err == nil {
		done.merge(plan)
		p.applied.Add(int64(plan.applied))
		p.stale.Add(int64(len(plan.stale)))
		for _, e := range plan.events {
			if e.Type.Breaker() {
				msg, args := e.BreakerLog()
				p.log.Warn(msg, args...)
			}
		}
		for _, s := range plan.stale {
			p.log.Debug("stale result discarded", "uid", s.res.BigTableUID, "attempt_uid", s.res.AttemptUID,
				"current_attempt_uid", s.current, "type", s.res.Type, "why", s.why)
		}
		p.logEnded(plan)
		return nil
	}
	if !store.Refused(err) {
		return err
	}
	if len(items) == 1 {
		reason := fmt.Sprintf("the database refused the result: %v (SQLSTATE %s)", err, store.SQLState(err))
		done.dead = append(done.dead, rejected{items[0].raw, reason, string(items[0].res.Type)})
		return nil
	}
	p.log.Warn("the database refused a value of the batch; applying it in halves to find the culprit", "results", len(items), "err", err)
	half := len(items) / 2
	if err := p.apply(ctx, items[:half], rcv, done); err != nil {
		return err
	}
	return p.apply(ctx, items[half:], rcv, done)
}

// applyTx is one transaction: lock the rows (skipping those another
// transaction holds), plan, save, record.
func (p *Poller) applyTx(ctx context.Context, items []item, rcv refresh.Received) (batchPlan, error) {
	seen := make(map[string]bool, len(items))
	uids := make([]string, 0, len(items))
	for _, it := range items {
		if !seen[it.res.BigTableUID] {
			seen[it.res.BigTableUID] = true
			uids = append(uids, it.res.BigTableUID)
		}
	}
	var plan batchPlan
	opt := store.TxOptions{LockTimeout: p.cfg.TxTimeout, IdleTimeout: p.cfg.TxTimeout, StatementTimeout: p.cfg.TxTimeout}
	err := p.store.InTxWith(ctx, opt, func(tx *store.Tx) error {
		rows, busyList, err := tx.LockOrSkip(ctx, uids)
		if err != nil {
			return err
		}
		var busy map[string]bool
		if len(busyList) > 0 {
			busy = make(map[string]bool, len(busyList))
			for _, uid := range busyList {
				busy[uid] = true
			}
		}
		plan = applyBatch(rows, busy, items, tx.Now(), rcv, p.rules, p.cfg.Draw)
		if err := tx.Save(ctx, plan.save); err != nil {
			return err
		}
		if err := tx.RecordAttempts(ctx, plan.finished); err != nil {
			return err
		}
		if err := tx.WriteEvents(ctx, plan.events); err != nil {
			return err
		}
		// Last: the upstreams' rows are shared by every batch and tick of
		// their records, so they are held only until the commit.
		if err := p.applyUpstreams(ctx, tx, &plan); err != nil {
			return err
		}
		if p.hooks.inTx != nil {
			p.hooks.inTx()
		}
		return nil
	})
	return plan, err
}

// Run polls until ctx is cancelled, then finishes the batch in hand, ends
// its lease and returns nil. It refuses to start (an error wrapping
// queue.ErrIDInUse) while another process holds the poller's id with a live
// lease. Errors (Redis or PostgreSQL down) are logged and retried with
// exponential backoff.
func (p *Poller) Run(ctx context.Context) error {
	work := context.WithoutCancel(ctx) // a batch in hand is finished
	var lastBeat, lastSummary time.Time
	registeredOnce := false
	if _, err := p.queue.Heartbeat(ctx, p.lease); errors.Is(err, queue.ErrIDInUse) {
		return fmt.Errorf("start poller: %w: another poller runs with this id; give each its own --id", err)
	} else if err == nil {
		lastBeat, registeredOnce = time.Now(), true
	}
	p.log.Info("poller running", "batch", p.cfg.Batch, "lease", p.cfg.Lease, "tx_timeout", p.cfg.TxTimeout,
		"max_result_wait", p.cfg.MaxResultWait, "dead_cap", p.cfg.DeadCap)
	var lastStats Stats
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		var n int
		roundStart := time.Now()
		err := func() error {
			if time.Since(lastBeat) > p.cfg.Lease/3 {
				registered, err := p.queue.Heartbeat(work, p.lease)
				if err != nil {
					return err
				}
				if registered && registeredOnce {
					p.log.Warn("poller registered again: its lease had lapsed (another poller may have adopted its batch)")
				}
				registeredOnce = true
				lastBeat = time.Now()
				if moved, err := p.queue.RecoverExpired(work, p.cfg.ID); err != nil {
					return err
				} else if moved > 0 {
					p.log.Warn("adopted the batch of a poller whose lease lapsed", "results", moved)
				}
			}
			var err error
			n, err = p.Once(work)
			return err
		}()
		if p.cfg.Observer != nil {
			p.cfg.Observer.ObserveRound(n, time.Since(roundStart), err)
		}
		if errors.Is(err, queue.ErrIDInUse) {
			return fmt.Errorf("poller stopped: %w: another process took this poller's id over after its lease lapsed", err)
		}
		if err != nil {
			lastBeat = time.Time{}
			backoff = min(max(2*backoff, p.cfg.Idle), p.cfg.MaxBackoff)
			p.log.Error("poller batch failed; retrying", "err", err, "retry_in", backoff)
			wait.Sleep(ctx, backoff)
			continue
		}
		if backoff > 0 {
			p.log.Info("poller recovered")
			backoff = 0
		}
		if time.Since(lastSummary) > time.Minute {
			if st := p.Stats(); st != lastStats {
				p.log.Info("poller summary", "applied", st.Applied, "stale", st.Stale, "dead", st.Dead, "handed_back", st.HandedBack,
					"batches", st.Batches, "lost_acks", st.LostAcks, "dead_dropped", st.DeadDropped)
				lastStats = st
			}
			lastSummary = time.Now()
		}
		if n == 0 {
			wait.Sleep(ctx, p.cfg.Idle)
		}
	}
	releaseCtx, cancel := context.WithTimeout(work, 10*time.Second)
	defer cancel()
	if left, err := p.queue.Release(releaseCtx, p.lease); err != nil {
		p.log.Error("release lease", "err", err)
	} else if left > 0 {
		p.log.Warn("left an unacknowledged batch for another poller to adopt", "results", left)
	}
	st := p.Stats()
	p.log.Info("poller stopped", "applied", st.Applied, "stale", st.Stale, "dead", st.Dead, "dead_dropped", st.DeadDropped)
	return nil
}

// newID returns hostname-pid-random: unique, and readable in Redis. It is
// also the instance token that tells two processes with one poller id apart.
func newID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}
