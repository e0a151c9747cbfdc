package wal

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"time"

	"github.com/contractrefine/autonomy/preflight"
)

// ConsumeStatus says what a consume did or would do.
type ConsumeStatus int

// Consume outcomes.
const (
	// Consumed: an unconsumed step of the kind was marked consumed.
	Consumed ConsumeStatus = iota + 1
	// Repeated: this request id already consumed a step of the kind; the
	// same allow is given again (Envoy may call Check more than once).
	Repeated
	// Replay: every step of the kind (with matching args) is consumed.
	Replay
	// Mismatch: no step of the kind has the given args digest.
	Mismatch
	// Gone: the preflight is no longer recorded. Compaction removes a
	// binding, with its consumed markers, only after it expired, so a
	// consume that reaches the log after that (its Check began before the
	// expiry) finds it gone rather than unconsumed.
	Gone
)

// String names the status.
func (s ConsumeStatus) String() string {
	switch s {
	case Consumed:
		return "consumed"
	case Repeated:
		return "repeated"
	case Replay:
		return "replay"
	case Mismatch:
		return "mismatch"
	case Gone:
		return "gone"
	}
	return "unknown"
}

// ConsumeRequest asks to consume one step of a preflight.
type ConsumeRequest struct {
	Binding *preflight.Binding
	Kind    string
	// ArgsDigest, when set, must equal the consumed step's args digest.
	ArgsDigest string
	// RequestID is the gated request's x-request-id ("" when absent).
	RequestID string
	// CallDigest is the canonical digest of the call's args, recorded with
	// the marker. A later consume with the same RequestID repeats the
	// allow only with the same digest: Envoy retrying a request sends the
	// same body, and a client able to pick its request id must not spend
	// one step on many different calls.
	CallDigest string
	Time       time.Time
	// Decision, when set, builds the autonomy.decision frame appended in the
	// same transaction as the consume. It may be called more than once:
	// DB.Consume calls it first, before queueing, with the result it
	// expects (the first step r admits, consumed), so that the frame is
	// encoded outside the commit loop, and again inside the commit only
	// when the consume's result differs (etcdstore's lone consume, too,
	// builds the frames of the step consumed before it knows). Its last
	// call has the consume's result; the frame written is the one built
	// for that result.
	Decision func(ConsumeResult) FrameInput
	// Held, when set, has true for each step (by index) this call may not
	// consume: it waits for an approval not given (docs/API.md). Approvals
	// are only ever given, never taken back, so a step held when the gate
	// looked may be free by the time of the consume, never the reverse.
	Held []bool
}

// Matches reports whether step s is one r may consume: the kind it calls,
// and the args digest when r binds arguments.
func (r *ConsumeRequest) Matches(s *preflight.BoundStep) bool {
	return s.Kind == r.Kind && (r.ArgsDigest == "" || s.ArgsDigest == r.ArgsDigest)
}

// Admits reports whether r may consume step i, s: it Matches and is not
// held for an approval.
func (r *ConsumeRequest) Admits(i int, s *preflight.BoundStep) bool {
	return r.Matches(s) && (i >= len(r.Held) || !r.Held[i])
}

// ConsumeResult is what a consume did.
type ConsumeResult struct {
	Status    ConsumeStatus
	StepID    string
	StepIndex int
	// Spent, with Status Replay, names the consumed steps the request
	// matched and the request ids that consumed them, as the store read
	// them: markers are never taken back while the binding can be used, so
	// a caller may remember them (binding's cache entry does).
	Spent []SpentStep
}

// sameOutcome reports whether res and o are the same answer: status and
// step (Spent only repeats what the store read).
func (res ConsumeResult) sameOutcome(o ConsumeResult) bool {
	return res.Status == o.Status && res.StepID == o.StepID && res.StepIndex == o.StepIndex
}

// SpentStep is one consumed step of a binding: its index and the
// x-request-id that consumed it.
type SpentStep struct {
	Index     int
	RequestID string
}

type consumedRecord struct {
	RequestID string `json:"request_id"`
	Seq       uint64 `json:"seq"`
	At        string `json:"at"`
	// ArgsDigest is the consuming call's ConsumeRequest.CallDigest.
	ArgsDigest string `json:"args_digest,omitempty"`
}

// repeats reports whether r repeats the call that wrote rec.
func (rec *consumedRecord) repeats(r *ConsumeRequest) bool {
	return rec.RequestID == r.RequestID && rec.ArgsDigest == r.CallDigest
}

func consumedKey(preflightID string, step int) []byte {
	k := make([]byte, 0, len(preflightID)+3)
	k = append(k, preflightID...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint16(k, uint16(step))
}

// splitConsumedKey reverses consumedKey.
func splitConsumedKey(k []byte) (preflightID string, step int, ok bool) {
	if len(k) < 3 || k[len(k)-3] != 0 {
		return "", 0, false
	}
	return string(k[:len(k)-3]), int(binary.BigEndian.Uint16(k[len(k)-2:])), true
}

// plan decides, inside tx, what consuming r would do.
func (tx *Tx) plan(r *ConsumeRequest) (ConsumeResult, error) {
	// The markers below mean something only while the binding is recorded:
	// compaction deletes both together.
	if _, ok := indexSeq(tx.btx.Bucket(bucketPreflights).Get([]byte(r.Binding.PreflightID))); !ok {
		return ConsumeResult{Status: Gone, StepIndex: -1}, nil
	}
	free, digestSeen := -1, false
	var spent []SpentStep
	for i := range r.Binding.Steps {
		s := &r.Binding.Steps[i]
		if !r.Admits(i, s) {
			continue
		}
		digestSeen = true
		v := tx.marker(r.Binding.AuditID, r.Binding.PreflightID, i)
		if v == nil {
			if free < 0 {
				free = i
			}
			continue
		}
		var rec consumedRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return ConsumeResult{}, ErrCorrupt
		}
		if r.RequestID != "" && rec.repeats(r) {
			return ConsumeResult{Status: Repeated, StepID: s.ID, StepIndex: i}, nil
		}
		spent = append(spent, SpentStep{Index: i, RequestID: rec.RequestID})
	}
	switch {
	case free >= 0:
		return ConsumeResult{Status: Consumed, StepID: r.Binding.Steps[free].ID, StepIndex: free}, nil
	case !digestSeen:
		return ConsumeResult{Status: Mismatch, StepIndex: -1}, nil
	default:
		return ConsumeResult{Status: Replay, StepIndex: -1, Spent: spent}, nil
	}
}

// Peek reports, without writing, what Consume would do now.
func (db *DB) Peek(ctx context.Context, r ConsumeRequest) (ConsumeResult, error) {
	if err := db.Trusted(); err != nil {
		return ConsumeResult{}, err
	}
	var res ConsumeResult
	err := db.View(func(tx *Tx) error {
		var err error
		res, err = tx.plan(&r)
		return err
	})
	return res, err
}

// Consume atomically checks and marks one unconsumed step of the kind as
// consumed, appending an autonomy.preflight_consumed frame and the decision
// frame, and returns once both are durable. Of N concurrent consumes of a
// one-step preflight exactly one gets Consumed.
func (db *DB) Consume(ctx context.Context, r ConsumeRequest) (ConsumeResult, error) {
	exp := db.expect(&r)
	var res ConsumeResult
	err := db.Update(ctx, func(tx *Tx) error {
		var err error
		res, err = tx.consume(&r, exp)
		return err
	})
	return res, err
}

// Consume is DB.Consume inside tx: the check, the marker and both frames,
// committed with the rest of tx.
func (tx *Tx) Consume(r ConsumeRequest) (ConsumeResult, error) {
	return tx.consume(&r, nil)
}

// expected is what a consume most likely does, with its frames encoded.
type expected struct {
	res      ConsumeResult
	consumed FrameInput
	decision FrameInput
}

// expect builds, in the writer's goroutine, the frames (db.preEncode) of
// the result a consume of r has unless another call spent the step first: the first
// step r admits, consumed. Encoding them here keeps that work out of the
// commit loop every writer waits on. Nil when r admits no step or an
// encoding fails (the commit then builds the frames, and fails the same way).
func (db *DB) expect(r *ConsumeRequest) *expected {
	for i := range r.Binding.Steps {
		if !r.Admits(i, &r.Binding.Steps[i]) {
			continue
		}
		e := &expected{res: ConsumeResult{Status: Consumed, StepID: r.Binding.Steps[i].ID, StepIndex: i}}
		var err error
		if e.consumed, err = db.preEncode(r.consumedFrame(e.res)); err != nil {
			return nil
		}
		if r.Decision != nil {
			if e.decision, err = db.preEncode(r.Decision(e.res)); err != nil {
				return nil
			}
		}
		return e
	}
	return nil
}

// consume is Tx.Consume, using exp's frames when the result is exp's.
func (tx *Tx) consume(r *ConsumeRequest, exp *expected) (ConsumeResult, error) {
	res, err := tx.plan(r)
	if err != nil {
		return res, err
	}
	if exp == nil || !exp.res.sameOutcome(res) {
		exp = &expected{res: res}
		if res.Status == Consumed {
			exp.consumed = r.consumedFrame(res)
		}
		if r.Decision != nil {
			exp.decision = r.Decision(res)
		}
	}
	if res.Status == Consumed {
		f, err := tx.Append(exp.consumed)
		if err != nil {
			return res, err
		}
		v, _ := json.Marshal(consumedRecord{RequestID: r.RequestID, Seq: f.Seq, At: f.Timestamp, ArgsDigest: r.CallDigest})
		if err := tx.putMarker(r.Binding.AuditID, r.Binding.PreflightID, res.StepIndex, v); err != nil {
			return res, err
		}
	}
	if r.Decision != nil {
		if _, err := tx.Append(exp.decision); err != nil {
			return res, err
		}
	}
	return res, nil
}

// consumedFrame is the autonomy.preflight_consumed frame of a consume that
// spent step res.StepIndex.
func (r *ConsumeRequest) consumedFrame(res ConsumeResult) FrameInput {
	return FrameInput{Kind: KindConsumed, AuditID: r.Binding.AuditID, Time: r.Time, Attrs: &ConsumedAttrs{
		ArgsDigest: r.CallDigest, PreflightID: r.Binding.PreflightID, RequestID: r.RequestID, StepID: res.StepID, ToolKind: r.Kind}}
}
