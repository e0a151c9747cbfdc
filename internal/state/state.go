// Package state is the seam between the decisions and the state that
// decides them: the bindings of preflights with their decision bytes, the
// consumed markers of their steps, idempotency keys and repair-session
// counters. The gate (package binding) and the preflight core (package
// preflight/submit) read and change that state only through Store; the
// log of frames (package wal, one hash-chained file per process) is a
// separate thing, which an implementation writes to as the contract below
// says.
//
// Two implementations exist or are planned: *wal.DB keeps the state in the
// same bbolt file as the frames, and a state change and its frame commit in
// one bbolt transaction; a shared store (etcd) keeps the state apart from
// the frames, which each process still writes to its own WAL. The contract
// is written so that both can meet it; package statetest checks it.
package state

import (
	"context"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// Store is the state that decides answers. Every method is safe for
// concurrent use, by goroutines of one process and, for a shared
// implementation, by every process sharing the store.
//
// Errors: wal.ErrNotFound for a record that does not exist (never
// recorded, or removed once expired); wal.ErrInProgress for an idempotency
// key another submission holds; wal.ErrConflict for a write whose
// precondition no longer holds (see RecordPreflight). Any other error means
// the state could not be read or changed: callers deny (503), they never
// treat it as "not found" or "not consumed". A method that returns an error
// after a write may or may not have made it durable; callers answer 503
// and an honest retry finds out (a consume repeats under the same request
// id, a preflight is decided afresh).
//
// Durability: every write is durable (on disk, or committed by the store's
// quorum) before the method returns nil.
//
// Caching: a binding record never changes once recorded, and a step seen
// consumed stays consumed while its binding can be used (markers go only
// with their expired binding), so callers may cache both. Nothing else may
// be cached by callers: not "not found", "not consumed", an idempotency
// record or a session count.
type Store interface {
	// RecordPreflight records a decided preflight, all of it or none of it:
	// the binding of rec.Binding.PreflightID with the decision bytes
	// rec.Decision, the autonomy.preflight frame carrying both (in this
	// process's log), one attempt of the repair session rec.SessionKey, and
	// the idempotency record rec.Idempotency. It returns the frame.
	//
	// When rec.SessionAttempt > 0, the session must have exactly
	// rec.SessionAttempt-1 attempts at the commit, else nothing is written
	// and the error is wal.ErrConflict: a count read under LockSession that
	// changed since (a lock lost to a partition) is never counted over.
	// When rec.Idempotency is set and its key names a preflight other than
	// rec.IdempotencyReplaces (what the caller read under its claim),
	// nothing is written and the error is wal.ErrConflict.
	//
	// Where the frame and the state cannot commit together (a shared store),
	// the implementation writes them so that a failure leaves no usable
	// binding it did not answer for: for instance the frame first, then the
	// state; the decision is returned only when both are durable.
	RecordPreflight(ctx context.Context, rec wal.PreflightRecord) (wal.Frame, error)

	// Binding returns the binding recorded for a preflight id, without its
	// decision bytes (Decision reads those); wal.ErrNotFound when none is.
	// Times round-trip to the nanosecond, in UTC.
	Binding(ctx context.Context, preflightID string) (preflight.Binding, error)
	// Decision returns the decision bytes of a preflight id exactly as they
	// were recorded (GET /v1/preflight/{id} serves them byte for byte).
	Decision(ctx context.Context, preflightID string) ([]byte, error)
	// ChainStatus reports whether a preflight of tenant ("" for none) was
	// recorded under auditID and whether its outcome was pass (contract 7,
	// decision_chain_complete); another tenant's is not found.
	ChainStatus(ctx context.Context, auditID, tenant string) (found, passed bool, err error)

	// Peek reports what Consume would do now, writing nothing. Its answer
	// may be stale by the time it returns; only Consume decides.
	Peek(ctx context.Context, r wal.ConsumeRequest) (wal.ConsumeResult, error)
	// Consume marks one unconsumed step of r.Kind (with r.ArgsDigest, when
	// set) consumed by r.RequestID, atomically with the check that it is
	// unconsumed: of N concurrent consumes of a one-step binding, from any
	// processes, exactly one gets wal.Consumed. A consume whose request id
	// (and call digest, when the marker has one) equals the marker's of a
	// matching step gets wal.Repeated and that step: Envoy may send one
	// request to Check more than once. Markers survive a restart.
	//
	// On wal.Consumed the implementation appends an
	// autonomy.preflight_consumed frame to this process's log; when
	// r.Decision is set, it appends the frame r.Decision returns for the
	// result, whatever the status. It returns nil only when the marker and
	// the frames are durable. The marker's commit is the moment the step is
	// spent: an implementation that cannot commit the frames with it commits
	// the marker first and the frames after, and returns an error when the
	// frames fail (the step stays spent, the caller denies: fail closed; a
	// retry under the same request id gets wal.Repeated).
	Consume(ctx context.Context, r wal.ConsumeRequest) (wal.ConsumeResult, error)

	// ClaimIdempotency takes the key for one submission until release is
	// called: a second claim of a held key fails with wal.ErrInProgress at
	// once (no waiting). A shared implementation bounds a claim whose
	// holder died (a lease), so the key is not held for ever.
	ClaimIdempotency(ctx context.Context, key string) (release func(), err error)
	// Idempotency returns the record of an idempotency key; wal.ErrNotFound
	// when the key has none.
	Idempotency(ctx context.Context, key string) (wal.IdempotencyRecord, error)

	// LockSession serialises the submissions of one repair session until
	// unlock is called, waiting while another holds it; it gives up with
	// ctx's error when ctx ends first. Under the lock, Session then
	// RecordPreflight with SessionAttempt set count one attempt each.
	LockSession(ctx context.Context, key string) (unlock func(), err error)
	// Session returns the counters of a repair session; one never seen is
	// the zero Session.
	Session(ctx context.Context, key string) (wal.Session, error)

	// Approvals (docs/API.md). RecordPreflight also records, for every step
	// of rec.Binding whose Approval is set, a pending wal.Approval of that
	// step (its args digest, authorities and expiry, the binding's tenant
	// and actor, RequestedAt = rec.Time), in the same all-or-nothing write.

	// Approval returns the approval of one step of a preflight;
	// wal.ErrNotFound when the step waits for none (or its binding is gone).
	// A decided approval never changes again, so callers may cache it;
	// never a pending one.
	Approval(ctx context.Context, preflightID, stepID string) (wal.Approval, error)
	// DecideApproval records in.Decision on a pending approval, atomically
	// with the check that it is pending: of N concurrent decisions exactly
	// one succeeds, the others get wal.ErrApprovalDecided with the recorded
	// approval. At or after the approval's ExpiresAt (compared with
	// in.DecidedAt) nothing is written and the error is
	// wal.ErrApprovalExpired; an approval never recorded is
	// wal.ErrNotFound. On success it appends an autonomy.approval frame
	// under the binding's audit id to this process's log and returns the
	// approval as decided (Decided.Seq names the frame), once both are
	// durable.
	DecideApproval(ctx context.Context, in wal.ApprovalInput) (wal.Approval, error)
	// ListApprovals returns up to q.Limit approvals q.Match keeps, newest
	// preflight id first (ids sort by creation time), and the cursor of the
	// next page: q.After set to it continues strictly after the last one
	// returned; "" when there is no next page.
	ListApprovals(ctx context.Context, q wal.ApprovalQuery) ([]wal.Approval, string, error)
}

var _ Store = (*wal.DB)(nil)
