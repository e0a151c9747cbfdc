package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/contractrefine/autonomy/preflight"
)

// PreflightRecord is everything written, in one transaction, when a
// preflight is decided.
type PreflightRecord struct {
	Binding preflight.Binding
	// Decision is the decision JSON exactly as returned to the caller, in
	// canonical form (internal/canon): it is stored as it is.
	Decision json.RawMessage
	// DecisionChecked says Decision is what preflight.Decision's
	// CanonicalJSON returned, unchanged: JSON by construction, so the log
	// stores it without parsing it again (that parse was a twentieth of a
	// preflight's CPU, docs/PERFORMANCE.md). Without it the log checks that
	// Decision is JSON before writing it.
	DecisionChecked bool
	Time            time.Time
	// Submit is what a preflight submitted through the API adds to the
	// frame's attrs (nil: nothing).
	Submit *SubmitAttrs
	// SessionKey, when set, counts one attempt against the repair session;
	// a repair_required Binding.Outcome opens the session's repair budget
	// when none is open yet.
	SessionKey string
	// SessionAttempt, when above zero, is the attempt this record counts:
	// the session must have SessionAttempt-1 attempts, else the write fails
	// with ErrConflict and writes nothing.
	SessionAttempt int
	// Idempotency, when set, records the idempotency key.
	Idempotency *IdempotencyRecord
	// IdempotencyReplaces is the preflight id the key's record named when
	// the caller read it under its claim ("" when the key had none): a
	// record whose decision is gone is replaced. When the key names another
	// preflight by the commit, the write fails with ErrConflict and writes
	// nothing.
	IdempotencyReplaces string
	// OutputMaxBytes is the envelope's outputContract.maxBytes, nil when
	// it set none: the gate applies it to the tool's response (docs/API.md).
	OutputMaxBytes *int64
	// ActorRef is the envelope's actor.idRef when it names another actor
	// than the binding's: the approvals of the preflight's steps refuse it
	// as their approver as they refuse the actor.
	ActorRef string
}

// IdempotencyRecord remembers which decision an idempotency key produced.
type IdempotencyRecord struct {
	Key           string `json:"-"`
	RequestDigest string `json:"request_digest"`
	PreflightID   string `json:"preflight_id"`
}

// RecordPreflight durably writes the autonomy.preflight frame, the binding
// index, one session attempt and the idempotency record of a decision.
func (db *DB) RecordPreflight(ctx context.Context, rec PreflightRecord) (Frame, error) {
	attrs, err := encodeAttrs(rec.attrs())
	if err != nil {
		return Frame{}, err
	}
	var frame Frame
	err = db.Update(ctx, func(tx *Tx) error {
		f, err := tx.recordPreflight(&rec, attrs)
		frame = f
		return err
	})
	return frame, err
}

// RecordPreflight writes what DB.RecordPreflight writes, inside tx, so that
// a caller filling a log can put many preflights in one commit.
func (tx *Tx) RecordPreflight(rec PreflightRecord) (Frame, error) {
	return tx.recordPreflight(&rec, rec.attrs())
}

// attrs is the autonomy.preflight frame's attrs. DB.RecordPreflight
// encodes them before queueing, outside the commit.
func (rec *PreflightRecord) attrs() *PreflightAttrs {
	b := &rec.Binding
	// The decision is canonical JSON already (see Decision), so it goes in
	// as it is: parsing it only to write the same bytes again was the
	// costliest step of recording a preflight (docs/PERFORMANCE.md).
	return &PreflightAttrs{ActorID: b.ActorID, ActorRef: rec.ActorRef, Decision: rec.Decision, decisionChecked: rec.DecisionChecked, ExpiresAt: b.ExpiresAt, Outcome: b.Outcome,
		Steps: b.Steps, OutputMaxBytes: recordedLimit(rec.OutputMaxBytes), PreflightID: b.PreflightID, Tenant: b.Tenant,
		SubmitAttrs: rec.Submit}
}

func (tx *Tx) recordPreflight(rec *PreflightRecord, attrs any) (Frame, error) {
	b := &rec.Binding
	f, err := tx.Append(FrameInput{Kind: KindPreflight, AuditID: b.AuditID, Time: rec.Time, Attrs: attrs})
	if err != nil {
		return Frame{}, err
	}
	if b.PreflightID != "" {
		v := encodeBindingRecord(f.Seq, b)
		if err := tx.btx.Bucket(bucketPreflights).Put([]byte(b.PreflightID), v); err != nil {
			return Frame{}, err
		}
		if err := tx.putPendingApprovals(rec); err != nil {
			return Frame{}, err
		}
	}
	if rec.SessionKey != "" {
		sb := tx.btx.Bucket(bucketSessions)
		st, err := decodeSession(sb.Get([]byte(rec.SessionKey)))
		if err != nil {
			return Frame{}, err
		}
		if rec.SessionAttempt > 0 && st.Attempts != rec.SessionAttempt-1 {
			return Frame{}, ErrConflict
		}
		st.Attempts++
		if st.RepairFrom == 0 && b.Outcome == preflight.OutcomeRepairRequired {
			st.RepairFrom = st.Attempts
		}
		if err := sb.Put([]byte(rec.SessionKey), st.encode()); err != nil {
			return Frame{}, err
		}
	}
	if rec.Idempotency != nil {
		ib := tx.btx.Bucket(bucketIdempotency)
		if old := ib.Get([]byte(rec.Idempotency.Key)); old != nil {
			var o IdempotencyRecord
			if err := json.Unmarshal(old, &o); err != nil {
				return Frame{}, fmt.Errorf("%w: idempotency record: %v", ErrCorrupt, err)
			}
			if o.PreflightID != rec.IdempotencyReplaces {
				return Frame{}, ErrConflict
			}
		}
		v, err := json.Marshal(rec.Idempotency)
		if err != nil {
			return Frame{}, err
		}
		if err := ib.Put([]byte(rec.Idempotency.Key), v); err != nil {
			return Frame{}, err
		}
	}
	return f, nil
}

// sessionCount reads a 4-byte count: a retired value, or the attempts at
// the start of a sessions value.
func sessionCount(v []byte) uint32 {
	if len(v) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(v)
}

// Session is what the log knows of one repair session.
type Session struct {
	// Attempts is how many preflights the session has recorded.
	Attempts int
	// RepairFrom is the attempt that was the session's first
	// repair_required, which opened its repair budget; 0 when none was.
	RepairFrom int
}

// decodeSession reads a sessions value: the attempts (4-byte BE) and the
// attempt of the first repair_required (4-byte BE, 0 for none); no value
// is a session not seen yet.
func decodeSession(v []byte) (Session, error) {
	switch len(v) {
	case 0:
		return Session{}, nil
	case 8:
		return Session{Attempts: int(binary.BigEndian.Uint32(v[:4])), RepairFrom: int(binary.BigEndian.Uint32(v[4:]))}, nil
	}
	return Session{}, fmt.Errorf("%w: a sessions value of %d bytes", ErrCorrupt, len(v))
}

func (s Session) encode() []byte {
	v := make([]byte, 8)
	binary.BigEndian.PutUint32(v[:4], uint32(s.Attempts))
	binary.BigEndian.PutUint32(v[4:], uint32(s.RepairFrom))
	return v
}

// Binding returns the recorded binding of a preflight id. It reads the
// compact record in the preflights index, not the frame; Decision returns
// the decision's JSON.
//
// Before the record is trusted it is compared with the frame it names, and
// that frame's hash with its contents and with the next frame's prev_hash
// (or the head): a record or frame edited while the service runs is a
// *VerifyError naming the seq, and the log is then trusted no more
// (trust.go). The gate reads a binding here only on a cache miss.
func (db *DB) Binding(ctx context.Context, preflightID string) (preflight.Binding, error) {
	if err := db.Trusted(); err != nil {
		return preflight.Binding{}, err
	}
	var b preflight.Binding
	var ve *VerifyError
	err := db.View(func(tx *Tx) error {
		var err error
		b, err = tx.binding(preflightID)
		if err == nil {
			ve = tx.checkBinding(&b)
		}
		return err
	})
	if ve != nil {
		db.distrust(ve)
		return preflight.Binding{}, ve
	}
	return b, err
}

// checkBinding compares binding b, as read from its record, with its
// autonomy.preflight frame, and that frame with the chain around it.
func (tx *Tx) checkBinding(b *preflight.Binding) *VerifyError {
	seq, _ := indexSeq(tx.btx.Bucket(bucketPreflights).Get([]byte(b.PreflightID)))
	bad := func(problem string) *VerifyError {
		return &VerifyError{Seq: seq, Problem: fmt.Sprintf("binding of %s: %s", b.PreflightID, problem)}
	}
	a, f, err := tx.preflightFrame(seq)
	switch {
	case err != nil:
		return bad("its frame cannot be read: " + err.Error())
	case recordDiffers(b, a, f):
		return bad("the binding record differs from its autonomy.preflight frame")
	case !f.hashMatches():
		return bad("hash does not match the frame's contents")
	}
	if next, err := tx.Frame(seq + 1); err == nil {
		if next.PrevHash != f.Hash {
			return bad("the next frame's prev_hash does not match this frame's hash")
		}
	} else if head := tx.recordedHead(); head.Seq != seq || head.Hash != f.Hash {
		return bad("the frame is not followed by the next one nor recorded as the head")
	}
	return nil
}

// recordedHead is the head recorded in the meta bucket.
func (tx *Tx) recordedHead() chainPoint {
	var h chainPoint
	if v := tx.btx.Bucket(bucketMeta).Get(keyHead); v != nil {
		_ = json.Unmarshal(v, &h) // a head that does not decode matches no frame
	}
	return h
}

// recordDiffers reports whether binding rec, read from a preflights
// record, says anything its autonomy.preflight frame f (attrs a) does not.
func recordDiffers(rec *preflight.Binding, a PreflightAttrs, f Frame) bool {
	return f.Kind != KindPreflight || a.PreflightID != rec.PreflightID || f.AuditID != rec.AuditID ||
		a.Outcome != rec.Outcome || a.ActorID != rec.ActorID || a.Tenant != rec.Tenant ||
		!a.ExpiresAt.Equal(rec.ExpiresAt) || !slices.EqualFunc(a.Steps, rec.Steps, sameStep)
}

// binding reads the compact record of a preflight still recorded;
// ErrNotFound once compaction removed it (or it never was).
func (tx *Tx) binding(preflightID string) (preflight.Binding, error) {
	v := tx.btx.Bucket(bucketPreflights).Get([]byte(preflightID))
	seq, ok := indexSeq(v)
	if !ok {
		return preflight.Binding{}, ErrNotFound
	}
	rec, err := decodeBindingRecord(preflightID, v[8:])
	if err != nil {
		return preflight.Binding{}, fmt.Errorf("%w: binding of frame %d: %v", ErrCorrupt, seq, err)
	}
	return rec, nil
}

// Decision returns the decision JSON of a preflight id exactly as it was
// returned to the caller, read from its autonomy.preflight frame.
func (db *DB) Decision(ctx context.Context, preflightID string) ([]byte, error) {
	var d []byte
	err := db.View(func(tx *Tx) error {
		seq, ok := indexSeq(tx.btx.Bucket(bucketPreflights).Get([]byte(preflightID)))
		if !ok {
			return ErrNotFound
		}
		a, _, err := tx.preflightFrame(seq)
		d = a.Decision
		return err
	})
	return d, err
}

// NoOutputLimit is what OutputMaxBytes returns for a preflight whose
// envelope set no outputContract.maxBytes.
const NoOutputLimit = -1

// OutputLimit is a recorded outputContract.maxBytes as a limit:
// NoOutputLimit when none was set.
func OutputLimit(recorded *int64) int64 {
	if recorded == nil || *recorded < 0 {
		return NoOutputLimit
	}
	return *recorded
}

// recordedLimit is the limit a record stores: nil for none (a negative
// limit, which validation refuses, is none too).
func recordedLimit(n *int64) *int64 {
	if OutputLimit(n) == NoOutputLimit {
		return nil
	}
	return n
}

// OutputMaxBytes returns the outputContract.maxBytes a preflight's
// envelope set, NoOutputLimit when it set none.
func (db *DB) OutputMaxBytes(ctx context.Context, preflightID string) (int64, error) {
	n := int64(NoOutputLimit)
	err := db.View(func(tx *Tx) error {
		seq, ok := indexSeq(tx.btx.Bucket(bucketPreflights).Get([]byte(preflightID)))
		if !ok {
			return ErrNotFound
		}
		a, _, err := tx.preflightFrame(seq)
		n = OutputLimit(a.OutputMaxBytes)
		return err
	})
	return n, err
}

// preflightFrame reads and decodes the autonomy.preflight frame at seq.
func (tx *Tx) preflightFrame(seq uint64) (PreflightAttrs, Frame, error) {
	f, err := tx.Frame(seq)
	if errors.Is(err, ErrNotFound) {
		// The index names it, and compaction removes both together.
		return PreflightAttrs{}, f, fmt.Errorf("%w: preflight frame %d is indexed but missing", ErrCorrupt, seq)
	}
	if err != nil {
		return PreflightAttrs{}, f, err
	}
	a, err := f.Preflight()
	return a, f, err
}

// Session returns what the log knows of a repair session; a session it has
// never seen is the zero Session.
func (db *DB) Session(ctx context.Context, key string) (Session, error) {
	if err := db.Trusted(); err != nil {
		return Session{}, err
	}
	var s Session
	err := db.View(func(tx *Tx) error {
		var err error
		s, err = decodeSession(tx.btx.Bucket(bucketSessions).Get([]byte(key)))
		return err
	})
	return s, err
}

// Idempotency returns the record of an idempotency key, or ErrNotFound.
func (db *DB) Idempotency(ctx context.Context, key string) (IdempotencyRecord, error) {
	if err := db.Trusted(); err != nil {
		return IdempotencyRecord{}, err
	}
	var r IdempotencyRecord
	err := db.View(func(tx *Tx) error {
		v := tx.btx.Bucket(bucketIdempotency).Get([]byte(key))
		if v == nil {
			return ErrNotFound
		}
		return json.Unmarshal(v, &r)
	})
	r.Key = key
	return r, err
}

// ChainStatus reports whether an autonomy.preflight frame of tenant exists
// under auditID and whether its outcome was pass (preflight.ChainResolver).
func (db *DB) ChainStatus(ctx context.Context, auditID, tenant string) (found, passed bool, err error) {
	if err := db.Trusted(); err != nil {
		return false, false, err
	}
	err = db.View(func(tx *Tx) error {
		return tx.eachAudit(auditID, func(f Frame) (bool, error) {
			if f.Kind != KindPreflight {
				return true, nil
			}
			a, err := f.Preflight()
			if err != nil {
				return false, err
			}
			found = a.Tenant == tenant
			passed = found && a.Outcome == preflight.OutcomePass
			return false, nil
		})
	})
	return found, passed, err
}

// AuditFrames returns the autonomy.preflight and autonomy.decision frames
// under auditID, sorted by timestamp ascending, seq breaking ties: the
// default audit join (AuditFramesOf names other kinds).
func (db *DB) AuditFrames(ctx context.Context, auditID string) ([]Frame, error) {
	return db.AuditFramesOf(ctx, auditID, DefaultAuditKinds)
}

// AuditInTenant applies GET /v1/audit's rule to the frames of an audit id:
// it belongs to the tenant of its preflight (the first autonomy.preflight
// frame); one without a preflight belongs to no tenant.
func AuditInTenant(frames []Frame, tenant string) bool {
	for i := range frames {
		if frames[i].Kind != KindPreflight {
			continue
		}
		a, err := frames[i].Preflight()
		return err == nil && a.Tenant == tenant
	}
	return tenant == ""
}

// DefaultAuditKinds are the kinds of the default audit join.
var DefaultAuditKinds = []string{KindPreflight, KindDecision}

// AuditFramesOf returns the frames of the given kinds under auditID, sorted
// by timestamp ascending, seq breaking ties; nil kinds are
// DefaultAuditKinds.
func (db *DB) AuditFramesOf(ctx context.Context, auditID string, kinds []string) ([]Frame, error) {
	if kinds == nil {
		kinds = DefaultAuditKinds
	}
	var out []Frame
	err := db.View(func(tx *Tx) error {
		return tx.eachAudit(auditID, func(f Frame) (bool, error) {
			if slices.Contains(kinds, f.Kind) {
				out = append(out, f)
			}
			return true, nil
		})
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool {
		ti, _ := time.Parse(TimestampFormat, out[i].Timestamp)
		tj, _ := time.Parse(TimestampFormat, out[j].Timestamp)
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return out[i].Seq < out[j].Seq
	})
	return out, nil
}

// eachAudit calls fn for every frame under auditID in seq order until fn
// returns false.
func (tx *Tx) eachAudit(auditID string, fn func(Frame) (bool, error)) error {
	prefix := append([]byte(auditID), 0)
	c := tx.btx.Bucket(bucketAudit).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if len(k) != len(prefix)+8 {
			continue
		}
		f, err := tx.Frame(binary.BigEndian.Uint64(k[len(prefix):]))
		if err == ErrNotFound {
			continue // removed by compaction
		}
		if err != nil {
			return err
		}
		more, err := fn(f)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// AppendDecision durably appends one frame, typically an autonomy.decision.
func (db *DB) AppendDecision(ctx context.Context, in FrameInput) (Frame, error) {
	in, err := db.preEncode(in)
	if err != nil {
		return Frame{}, err
	}
	var frame Frame
	err = db.Update(ctx, func(tx *Tx) error {
		f, err := tx.Append(in)
		frame = f
		return err
	})
	return frame, err
}
