package wal

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Trust. A log that fails verification is never decided from: with
// Options.VerifyOnOpen, Open verifies the whole log in the background
// (Verify), and until that is done, and for good once it failed, every
// method the service decides with (Binding, Peek, Session, Idempotency,
// ChainStatus, and every write: Update and all that goes through it,
// Probe and Compact included) fails with ErrVerifying or a *VerifyError.
// What an operator reads to look into the log (Decision, AuditFrames,
// Export, Stats, Verify, Head, View) keeps working, so the trail can be
// read and exported from the running service as from `autonomy wal
// verify/export/audit --data-dir` on a stopped one.
//
// After that, Binding compares the compact record it reads with the frame
// it names (and that frame's hash and link to the next frame) on every
// call, which is every binding-cache miss of the gate: a record edited
// while the service runs fails that call, and the log is then treated as
// having failed verification.

var (
	// ErrVerifying reports a decision asked of a log still being verified.
	ErrVerifying = errors.New("wal: the log is being verified")
	// ErrUnverified reports a decision asked of a log that failed
	// verification; the error is a *VerifyError naming the seq.
	ErrUnverified = errors.New("wal: the log failed verification")
)

// VerifyError is a log that failed verification: at open, or when a
// binding record was found to differ from its frame.
type VerifyError struct {
	// Seq is the first bad seq (0 when the problem names no frame).
	Seq     uint64
	Problem string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("wal: the log failed verification at seq %d: %s", e.Seq, e.Problem)
}

// Unwrap makes a VerifyError match ErrUnverified.
func (e *VerifyError) Unwrap() error { return ErrUnverified }

// trustState is what the DB knows of its log's verification.
type trustState struct {
	err error // nil: verified (or not asked to verify); ErrVerifying; a *VerifyError
}

// Trusted reports whether decisions may be made from the log: nil once it
// verified (or when VerifyOnOpen is off), else ErrVerifying or the
// *VerifyError it failed with.
func (db *DB) Trusted() error {
	if s := db.trust.Load(); s != nil {
		return s.err
	}
	return nil
}

// Verified is closed once the verification Open started has ended (at
// once when VerifyOnOpen is off).
func (db *DB) Verified() <-chan struct{} { return db.verified }

// startVerify runs Verify in the background; decisions wait for it.
func (db *DB) startVerify() {
	db.trust.Store(&trustState{err: ErrVerifying})
	ctx, cancel := context.WithCancel(context.Background())
	db.cancelVerify = cancel
	go func() {
		defer close(db.verified)
		start := time.Now()
		rep, err := db.Verify(ctx)
		took := time.Since(start)
		// The walk read every page: they are released now rather than
		// after the next read or write (resident.go).
		db.releasePages()
		if err == nil && !rep.OK() {
			err = &VerifyError{Seq: rep.BadSeq, Problem: rep.Problem}
		}
		var ve *VerifyError
		switch {
		case errors.As(err, &ve):
			db.distrust(ve)
		case errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled):
			// Closed before the walk ended (a server that failed to
			// start after opening its log): nothing failed verification,
			// and every use of the log fails now anyway. A failure a
			// read found meanwhile stands.
			if cur := db.trust.Load(); cur != nil && errors.Is(cur.err, ErrVerifying) {
				db.trust.CompareAndSwap(cur, &trustState{err: ErrClosed})
			}
		case err != nil:
			// The log could not be read (damaged, closing): nothing is
			// decided from it, as with a failed verification.
			db.distrust(&VerifyError{Problem: "it could not be read: " + err.Error()})
		default:
			db.trust.Store(&trustState{})
			db.log.Info("wal verified", "frames", rep.Frames, "first_seq", rep.FirstSeq, "last_seq", rep.LastSeq,
				"took_ms", took.Milliseconds())
		}
		if db.opts.OnVerify != nil {
			db.opts.OnVerify(rep.Frames, took, db.Trusted())
		}
	}()
}

// distrust records that the log failed verification, once: one log line
// names the seq, and OnVerify tells the caller (a metric).
func (db *DB) distrust(ve *VerifyError) {
	for {
		old := db.trust.Load()
		if old != nil && errors.Is(old.err, ErrUnverified) {
			return // already failed: the first failure stands
		}
		if db.trust.CompareAndSwap(old, &trustState{err: ve}) {
			break
		}
	}
	db.log.Error("wal failed verification; nothing is decided from it until it is repaired",
		"seq", ve.Seq, "problem", ve.Problem, "wal", db.path)
	if db.opts.OnVerify != nil && db.verifyDone() {
		db.opts.OnVerify(0, 0, ve)
	}
}

// verifyDone reports whether the open-time verification has ended, so a
// failure found later is reported by itself.
func (db *DB) verifyDone() bool {
	select {
	case <-db.verified:
		return true
	default:
		return false
	}
}
