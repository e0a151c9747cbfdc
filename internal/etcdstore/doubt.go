package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/contractrefine/autonomy/wal"
)

// A shared-path consume whose marker's transaction was sent and not
// answered (etcd stalled past request_timeout) is answered 503, yet etcd
// may apply the marker when it resumes: the step is then spent by that
// request id, and no log holds its autonomy.preflight_consumed frame. The
// replica keeps the doubt and, once etcd answers, reads the marker: when
// it is that call's and no replica logged the call's consumed frame (a
// repeat of the call logs it, repeatFrames), the replica logs it, so the
// record of proof names every spent step and check-store finds no
// marker_without_frame. The call's own decision frame (its 503) is in the
// log already.

// doubtWindow is how long, once etcd answers again, a doubt whose marker
// is not there is kept: a proposal etcd received but had not committed
// may still be applied in that time.
const doubtWindow = 10 * time.Second

// errWithdrawn is a consume attempt answered before it was sent: nothing
// of it can reach etcd, so there is no doubt to keep.
var errWithdrawn = errors.New("not sent: the transaction before it did not answer")

// doubt keeps the consume r's attempt on step, whose transaction did not
// answer, until it is settled.
func (s *Store) doubt(r *wal.ConsumeRequest, step int) {
	d := *r
	d.Decision = nil // its 503's frame is the caller's to log, and logged
	go func() {
		wait := 50 * time.Millisecond
		var giveUp time.Time
		for {
			settled, err := s.settleDoubt(s.bg, &d, step)
			switch {
			case settled:
				return
			case err == nil && giveUp.IsZero():
				giveUp = time.Now().Add(doubtWindow)
			case err == nil && time.Now().After(giveUp):
				return
			}
			select {
			case <-time.After(wait):
			case <-s.bg.Done():
				return
			}
			wait = min(2*wait, time.Second)
		}
	}()
}

// settleDoubt reads the marker of r's step and reports whether the doubt
// is settled: the marker is another call's, or it is r's and its consumed
// frame is on record (logged here if no replica had it). A marker not
// there yet settles nothing (err nil); an error is etcd still away.
func (s *Store) settleDoubt(ctx context.Context, r *wal.ConsumeRequest, step int) (bool, error) {
	v, err := s.get(ctx, s.p.marker(r.Binding.PreflightID, step))
	if errors.Is(err, wal.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var m marker
	if err := json.Unmarshal(v, &m); err != nil || m.RequestID != r.RequestID || m.Replica != s.o.Replica {
		return true, nil
	}
	// A lone consume's copies went with its marker: until the dropper has
	// deleted (or taken up) the copies of its failed commit the log is
	// held, and a copy etcd still holds would pass for the frame on record.
	if err := s.log.Refuses(); err != nil {
		return false, err
	}
	res := wal.ConsumeResult{Status: wal.Consumed, StepID: r.Binding.Steps[step].ID, StepIndex: step}
	if logged, err := s.consumeLogged(ctx, r, res.StepID); err != nil || logged {
		return logged, err
	}
	if _, err := s.logAndCopy(ctx, r.ConsumeFrames(res)); err != nil {
		return false, fmt.Errorf("log the consumed frame of a consume etcd applied after its 503: %w", err)
	}
	s.logger.Warn("etcd applied a consume after its caller was answered 503; its consumed frame is logged",
		"audit_id", r.Binding.AuditID, "preflight_id", r.Binding.PreflightID, "step_id", res.StepID, "request_id", r.RequestID)
	return true, nil
}
