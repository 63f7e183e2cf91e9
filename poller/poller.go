// Package poller applies workers' results. It drains the output list in
// atomic batches into its own processing list (which a crash cannot lose: a
// live poller gives the list of a dead one back to the output list), applies
// every valid result of a batch in one database transaction, and only then
// acknowledges the batch. A result whose attempt is no longer the record's is
// stale: counted and discarded. A result that cannot be applied (malformed,
// oversized, unknown record) goes to the dead-letter list with its reason.
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
)

// Config tunes a Poller. Zero values take the defaults.
type Config struct {
	// ID names this poller's processing list; default a random id. Reusing
	// the id of a killed poller makes it process that poller's batch first.
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
	// poller silent for longer has its unacknowledged results recovered by
	// the others. Default 15s.
	Lease time.Duration
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
}

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

// Stats counts results since the poller was created. Every drained result is
// exactly one of applied, stale or dead.
type Stats struct {
	Applied int64 // results that changed a record
	Stale   int64 // results for an attempt that is not the record's (discarded)
	Dead    int64 // results moved to the dead-letter list
	Batches int64 // batches committed
}

// Poller drains and applies results.
type Poller struct {
	store *store.Store
	queue *queue.Queue
	cfg   Config
	rules *refresh.RulesCache
	log   *slog.Logger

	applied, stale, dead, batches atomic.Int64
}

// New returns a Poller.
func New(st *store.Store, q *queue.Queue, cfg Config) *Poller {
	cfg = cfg.withDefaults()
	return &Poller{store: st, queue: q, cfg: cfg, rules: refresh.NewRulesCache(0),
		log: cfg.Logger.With("poller", cfg.ID)}
}

// Stats returns the counters so far.
func (p *Poller) Stats() Stats {
	return Stats{Applied: p.applied.Load(), Stale: p.stale.Load(), Dead: p.dead.Load(), Batches: p.batches.Load()}
}

// ID returns the poller's id.
func (p *Poller) ID() string { return p.cfg.ID }

// Once processes what this poller has pending from before (a failed batch,
// or a restart with the same id), or else drains and processes one batch. It
// returns how many results it handled; 0 means the output list was empty.
func (p *Poller) Once(ctx context.Context) (int, error) {
	raw, oversized, err := p.queue.Drain(ctx, p.cfg.ID, p.cfg.Batch, p.cfg.MaxResultBytes)
	if err != nil {
		return 0, err
	}
	if oversized > 0 {
		p.dead.Add(int64(oversized))
		if p.cfg.Observer != nil {
			p.cfg.Observer.ObserveResults(BatchCounts{Results: map[ResultKind]int{{TypeInvalid, OutcomeDead}: oversized}})
		}
		p.log.Warn("oversized results dead-lettered", "count", oversized, "limit_bytes", p.cfg.MaxResultBytes)
	}
	if len(raw) == 0 {
		return oversized, nil
	}
	if err := p.process(ctx, raw); err != nil {
		return oversized, err
	}
	return oversized + len(raw), nil
}

// process applies one batch and acknowledges it. On error nothing is
// acknowledged: the batch stays in the processing list and is tried again.
func (p *Poller) process(ctx context.Context, raw []string) error {
	var dead []protocol.DeadLetter
	var deadTypes []string
	deadLetter := func(value, reason, typ string) {
		dead = append(dead, protocol.DeadLetter{Reason: reason, DeadAt: time.Now().UTC(), Raw: value})
		deadTypes = append(deadTypes, typ)
	}
	type item struct {
		raw string
		res protocol.Result
	}
	var valid []item
	seen := map[string]bool{}
	var uids []string
	for _, v := range raw {
		r, err := protocol.DecodeResult([]byte(v), p.cfg.MaxResultBytes)
		if err != nil {
			deadLetter(v, err.Error(), TypeInvalid)
			continue
		}
		valid = append(valid, item{v, r})
		if !seen[r.BigTableUID] {
			seen[r.BigTableUID] = true
			uids = append(uids, r.BigTableUID)
		}
	}
	decodeDead := len(dead)

	var applied, stale int64
	var counts BatchCounts
	err := p.store.InTx(ctx, func(tx *store.Tx) error {
		dead, applied, stale = dead[:decodeDead], 0, 0
		deadTypes = deadTypes[:decodeDead]
		counts = BatchCounts{Results: map[ResultKind]int{}}
		rows, err := tx.Lock(ctx, uids)
		if err != nil {
			return err
		}
		now := tx.Now()
		var order []string
		changed := map[string]bool{}
		var finished []store.Attempt
		for _, it := range valid {
			r := it.res
			row, ok := rows[r.BigTableUID]
			if !ok {
				deadLetter(it.raw, fmt.Sprintf("unknown record: no big_table_uid %q", r.BigTableUID), string(r.Type))
				continue
			}
			rules, err := p.rules.Get(row.Schedule, row.Policy)
			if err != nil {
				deadLetter(it.raw, fmt.Sprintf("record %q cannot apply results: %v", r.BigTableUID, err), string(r.Type))
				continue
			}
			old := row.State
			var outcome store.Outcome
			var step refresh.Step
			switch r.Type {
			case protocol.Success:
				row.State, err = rules.Succeed(row.State, now, r.AttemptUID)
				outcome = store.OutcomeSuccess
			case protocol.Failure:
				row.State, step, err = rules.Fail(row.State, now, r.AttemptUID, refresh.Failure{
					Message: r.Message, NotRetryable: r.NotRetryable(), Reason: r.UserFriendlyReason, Draw: p.cfg.Draw(),
				})
				outcome = store.OutcomeFailure
			case protocol.Status:
				if err = row.State.Status(now, r.AttemptUID); err == nil {
					row.StatusMessage = r.Message
				}
			}
			if errors.Is(err, refresh.ErrStale) {
				stale++
				counts.Results[ResultKind{string(r.Type), OutcomeStale}]++
				p.log.Debug("stale result discarded", "uid", r.BigTableUID, "attempt_uid", r.AttemptUID,
					"current_attempt_uid", old.AttemptUID, "type", r.Type, "why", err)
				continue
			}
			if err != nil {
				return fmt.Errorf("apply %s to %s: %w", r.Type, r.BigTableUID, err)
			}
			applied++
			counts.Results[ResultKind{string(r.Type), OutcomeApplied}]++
			if row.Disabled && !old.Disabled {
				counts.Disabled++
			}
			if outcome != "" {
				finished = append(finished, store.Attempt{
					AttemptUID: r.AttemptUID, UID: r.BigTableUID, AttemptNo: old.AttemptNo, StartedAt: old.StartedAt,
					FinishedAt: now, Outcome: outcome, Message: r.Message, Decision: string(step.Decision),
				})
			}
			p.log.Debug("result applied", "uid", r.BigTableUID, "type", r.Type, "attempt_no", old.AttemptNo,
				"decision", step.Decision, "refresh_at", row.RefreshAt, "disabled", row.Disabled, "reason", row.DisabledReason)
			rows[r.BigTableUID] = row
			if !changed[r.BigTableUID] {
				changed[r.BigTableUID] = true
				order = append(order, r.BigTableUID)
			}
		}
		save := make([]store.Row, 0, len(order))
		for _, uid := range order {
			save = append(save, rows[uid])
		}
		if err := tx.Save(ctx, save); err != nil {
			return err
		}
		return tx.RecordAttempts(ctx, finished)
	})
	if err != nil {
		return fmt.Errorf("apply batch of %d results: %w", len(raw), err)
	}
	// Committed. A crash before this acknowledgement replays the batch, whose
	// results are then stale: nothing is applied twice.
	ackCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := p.queue.Ack(ackCtx, p.cfg.ID, dead); err != nil {
		return err
	}
	for _, d := range dead {
		p.log.Warn("result dead-lettered", "reason", d.Reason, "bytes", len(d.Raw))
	}
	p.applied.Add(applied)
	p.stale.Add(stale)
	p.dead.Add(int64(len(dead)))
	p.batches.Add(1)
	if p.cfg.Observer != nil {
		for _, t := range deadTypes {
			counts.Results[ResultKind{t, OutcomeDead}]++
		}
		p.cfg.Observer.ObserveResults(counts)
	}
	p.log.Debug("batch applied", "results", len(raw), "applied", applied, "stale", stale, "dead", len(dead))
	return nil
}

// Run polls until ctx is cancelled, then finishes the batch in hand, hands
// back anything unacknowledged and returns nil. Errors (Redis or PostgreSQL
// down) are logged and retried with exponential backoff.
func (p *Poller) Run(ctx context.Context) error {
	p.log.Info("poller running", "batch", p.cfg.Batch, "lease", p.cfg.Lease)
	work := context.WithoutCancel(ctx) // a batch in hand is finished
	var lastBeat, lastSummary time.Time
	var lastStats Stats
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		var n int
		roundStart := time.Now()
		err := func() error {
			if time.Since(lastBeat) > p.cfg.Lease/3 {
				if err := p.queue.Heartbeat(work, p.cfg.ID, p.cfg.Lease); err != nil {
					return err
				}
				lastBeat = time.Now()
				if moved, err := p.queue.RecoverExpired(work); err != nil {
					return err
				} else if moved > 0 {
					p.log.Warn("recovered results of a dead poller", "results", moved)
				}
			}
			var err error
			n, err = p.Once(work)
			return err
		}()
		if p.cfg.Observer != nil {
			p.cfg.Observer.ObserveRound(n, time.Since(roundStart), err)
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
				p.log.Info("poller summary", "applied", st.Applied, "stale", st.Stale, "dead", st.Dead, "batches", st.Batches)
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
	if moved, err := p.queue.Release(releaseCtx, p.cfg.ID); err != nil {
		p.log.Error("release processing list", "err", err)
	} else if moved > 0 {
		p.log.Warn("handed unacknowledged results back", "results", moved)
	}
	st := p.Stats()
	p.log.Info("poller stopped", "applied", st.Applied, "stale", st.Stale, "dead", st.Dead)
	return nil
}

// newID returns hostname-pid-random: unique, and readable in Redis.
func newID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}
