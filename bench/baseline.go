package bench

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bigtables/bigtables/protocol"
	"github.com/bigtables/bigtables/refresh"
	"github.com/redis/go-redis/v9"
)

// baseline runs the same N records through the original BigTable refresh
// design, row at a time (a cron job that starts one due row at a time, and a
// poll that applies results one update each), implemented here only, and
// returns cycles per second. It keeps no attempt history, so the comparison leans in
// its favour.
func (e *env) baseline(ctx context.Context) (float64, error) {
	if err := e.reset(ctx); err != nil {
		return 0, err
	}
	if err := e.insert(ctx, "r", e.cfg.Records, time.Now().Add(-time.Second)); err != nil {
		return 0, err
	}
	rules := refresh.Rules{Policy: refresh.DefaultPolicy()}
	rules.Policy.Timeout = refresh.Duration(10 * time.Minute)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var applied atomic.Int64
	errc := make(chan error, 2)
	start := time.Now()

	// The original cron job: select the first due row, start it, push
	// its job, save the row.
	wg.Go(func() {
		for runCtx.Err() == nil {
			var uid, url string
			err := e.db.QueryRowContext(runCtx, `SELECT uid, input_url FROM bigtables
				WHERE attempt_uid IS NULL AND NOT disabled_until_update AND refresh_at < now()
				ORDER BY refresh_at LIMIT 1`).Scan(&uid, &url) // the due index, as ours
			if errors.Is(err, sql.ErrNoRows) {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if err != nil {
				if runCtx.Err() == nil {
					errc <- err
				}
				return
			}
			now := time.Now()
			st, err := rules.Start(refresh.State{RefreshAt: now.Add(-time.Second)}, now, refresh.NewAttemptUID())
			if err != nil {
				errc <- err
				return
			}
			// Save, then push: the original pushes first, which loses a
			// fast worker's answer (docs/design.md, C2); the baseline
			// measured is "select one due row, update it, push".
			_, err = e.db.ExecContext(runCtx, `UPDATE bigtables SET attempt_uid = $2, attempt_no = attempt_no + 1,
				started_at = $3, deadline_at = $4, refresh_at = NULL WHERE uid = $1`, uid, st.AttemptUID, now, st.DeadlineAt)
			if err == nil {
				job := protocol.Job{BigTableUID: uid, AttemptUID: st.AttemptUID, InputURL: url, AttemptNo: st.AttemptNo, DeadlineAt: st.DeadlineAt}
				err = e.rdb.RPush(runCtx, e.names.Input, job.Encode()).Err()
			}
			if err != nil {
				errc <- err
				return
			}
		}
	})
	// The original poll: MULTI LRANGE 0 99 / LTRIM 100 -1, load the rows, one
	// update per result whose attempt is current.
	wg.Go(func() {
		for runCtx.Err() == nil {
			var lr *redis.StringSliceCmd
			_, err := e.rdb.TxPipelined(runCtx, func(p redis.Pipeliner) error {
				lr = p.LRange(runCtx, e.names.Output, 0, 99)
				p.LTrim(runCtx, e.names.Output, 100, -1)
				return nil
			})
			if err != nil {
				if runCtx.Err() == nil {
					errc <- err
				}
				return
			}
			items := lr.Val()
			if len(items) == 0 {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			for _, raw := range items {
				r, err := protocol.DecodeResult([]byte(raw), 0)
				if err != nil {
					continue
				}
				res, err := e.db.ExecContext(runCtx, `UPDATE bigtables SET attempt_uid = NULL, attempt_no = 0,
					started_at = NULL, deadline_at = NULL WHERE uid = $1 AND attempt_uid = $2`, r.BigTableUID, r.AttemptUID)
				if err != nil {
					if runCtx.Err() == nil {
						errc <- err
					}
					return
				}
				if n, _ := res.RowsAffected(); n == 1 {
					applied.Add(1)
				}
			}
		}
	})
	ws := e.workers(runCtx, e.cfg.Workers, nil)
	err := e.waitCycles(ctx, e.cfg.Records, "baseline design", start, func(context.Context) (int, error) {
		select {
		case err := <-errc:
			return 0, err
		default:
			return int(applied.Load()), nil
		}
	})
	elapsed := time.Since(start)
	stop()
	wg.Wait()
	ws.Wait()
	if err != nil {
		return 0, err
	}
	return float64(e.cfg.Records) / elapsed.Seconds(), nil
}
