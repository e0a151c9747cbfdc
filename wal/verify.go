package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/contractrefine/autonomy/preflight"
)

// VerifyReport is the result of Verify.
type VerifyReport struct {
	// Frames is how many frames were checked.
	Frames int `json:"frames"`
	// FirstSeq and LastSeq bound the frames present.
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// BadSeq is the first seq where the chain breaks, 0 when it holds.
	BadSeq uint64 `json:"bad_seq,omitempty"`
	// Problem says what is wrong at BadSeq.
	Problem string `json:"problem,omitempty"`
	// ChainHeld is set when every frame and the head held and what is
	// wrong is an index record (a binding record, a consumed marker, an
	// approval record, an audit index entry) that disagrees with them:
	// BadSeq then names the frame the record names, not a break in the
	// chain.
	ChainHeld bool `json:"chain_held,omitempty"`
}

// OK reports whether the chain holds and every index record agrees with it.
func (r VerifyReport) OK() bool { return r.BadSeq == 0 && r.Problem == "" }

// Verify walks every frame in seq order and checks the hash chain: each
// frame decodes, its seq follows the previous one, its prev_hash is the
// previous frame's hash and its hash is right. It stops at the first break.
// The error is for failures to read the log, not for a broken chain.
func (db *DB) Verify(ctx context.Context) (VerifyReport, error) {
	var rep VerifyReport
	err := db.View(func(tx *Tx) error {
		// The walk reads the whole file about in order: readahead on each
		// fault instead of one page at a time, then bbolt's own advice
		// again (resident.go).
		db.advise(tx.btx, true)
		defer db.advise(tx.btx, false)
		w := chainWalk{tx: tx, rep: &rep, audit: tx.btx.Bucket(bucketAudit)}
		if v := tx.btx.Bucket(bucketMeta).Get(keyBase); v != nil {
			if err := json.Unmarshal(v, &w.prev); err != nil {
				return fmt.Errorf("%w: base: %v", ErrCorrupt, err)
			}
		}
		c := tx.btx.Bucket(bucketFrames).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			if !w.frame(k, v) {
				return nil
			}
			if rep.Frames%verifyRelease == 0 {
				// The pages read so far are not read again: released, the
				// walk leaves no more than a stretch of the file mapped
				// (resident.go). A release that fails leaves them mapped.
				_ = db.releaseIn(tx.btx)
			}
		}
		return w.indexes(ctx)
	})
	return rep, err
}

// chainWalk is Verify's walk of the frames in seq order.
type chainWalk struct {
	tx    *Tx
	rep   *VerifyReport
	audit *bolt.Bucket
	prev  chainPoint // the last frame checked, or the log's base
	// indexed counts the frames with an audit id, each found in the index.
	indexed int
	// bindingsOK and markersOK count the binding records and consumed
	// markers found to agree with their frames, each once (see
	// allMatched).
	bindingsOK, markersOK int
}

// frame checks the frame stored as v under key k against the chain so
// far and the indexes that name it. It reports false at the first break,
// recorded in the report.
func (w *chainWalk) frame(k, v []byte) bool {
	seq := uint64(0)
	if len(k) == 8 {
		seq = binary.BigEndian.Uint64(k)
	}
	if w.rep.FirstSeq == 0 {
		w.rep.FirstSeq = seq
	}
	w.rep.LastSeq = seq
	bad := func(problem string) bool {
		w.rep.BadSeq, w.rep.Problem = seq, problem
		return false
	}
	f, err := DecodeFrame(v)
	switch {
	case len(k) != 8:
		return bad("malformed key")
	case err != nil:
		return bad(err.Error())
	case f.Seq != seq:
		return bad(fmt.Sprintf("frame says seq %d under key %d", f.Seq, seq))
	case seq != w.prev.Seq+1:
		return bad(fmt.Sprintf("seq %d follows %d", seq, w.prev.Seq))
	case f.PrevHash != w.prev.Hash:
		return bad("prev_hash does not match the previous frame's hash")
	case !f.hashMatches():
		return bad("hash does not match the frame's contents")
	}
	switch f.Kind {
	case KindConsumed:
		problem, matched := w.tx.checkConsumedFrame(f)
		if problem != "" {
			return bad(problem)
		}
		if matched {
			w.markersOK++
		}
	case KindPreflight:
		if w.tx.bindingAgrees(f) {
			w.bindingsOK++
		}
	case KindApproval:
		if problem := w.tx.checkApprovalFrame(f); problem != "" {
			return bad(problem)
		}
	}
	if f.AuditID != "" {
		if !hasKey(w.audit, auditKey(f.AuditID, f.Seq)) {
			return bad(fmt.Sprintf("the audit index has no entry for this frame: audit id %s would not list it", f.AuditID))
		}
		w.indexed++
	}
	w.rep.Frames++
	w.prev = chainPoint{Seq: f.Seq, Hash: f.Hash}
	return true
}

// indexes checks, once every frame held, that the head record names the
// last frame and that the binding records, the audit index and the
// consumed markers hold nothing the frames do not account for.
func (w *chainWalk) indexes(ctx context.Context) error {
	tx, rep := w.tx, w.rep
	var head chainPoint
	if v := tx.btx.Bucket(bucketMeta).Get(keyHead); v != nil {
		if err := json.Unmarshal(v, &head); err != nil {
			return fmt.Errorf("%w: head: %v", ErrCorrupt, err)
		}
	}
	if head != w.prev {
		// The first seq the head and the frames disagree on: a frame past
		// the head, or the first one the head names and the log lacks.
		rep.BadSeq, rep.Problem = min(head.Seq, w.prev.Seq)+1, fmt.Sprintf("head records seq %d but the log ends at %d", head.Seq, w.prev.Seq)
		return nil
	}
	defer func() { rep.ChainHeld = !rep.OK() }()
	if all, err := allMatched(ctx, tx.btx.Bucket(bucketPreflights), w.bindingsOK); err != nil {
		return err
	} else if !all {
		if err := tx.verifyBindings(ctx, rep); err != nil || !rep.OK() {
			return err
		}
	}
	markers, err := tx.verifyAuditIndex(ctx, w.indexed, rep)
	if err != nil || !rep.OK() {
		return err
	}
	if tx.legacyMarkers() != nil {
		if markers, err = tx.markerCount(ctx); err != nil {
			return err
		}
	}
	if markers != w.markersOK {
		if err := tx.verifyMarkers(ctx, rep); err != nil || !rep.OK() {
			return err
		}
	}
	return tx.verifyApprovals(ctx, rep)
}

// The binding records and consumed markers are checked against their
// frames during the walk, each frame already decoded: a preflight frame
// against the record its preflight id names (bindingAgrees), a consumed
// frame against its marker (checkConsumedFrame). A record or marker agrees
// with at most one frame, the one at the seq it names, so when as many
// agreed as the index holds, every entry was checked, and the index is
// only counted (allMatched). Otherwise the index is walked entry by entry
// (verifyBindings, verifyMarkers), reading each one's frame again, which
// names the first entry that is wrong in the index's own order.

// allMatched reports whether bucket b holds exactly matched entries. An
// entry that agreed with no frame (a malformed one included) leaves the
// count short, and the entry-by-entry walk then names it.
func allMatched(ctx context.Context, b *bolt.Bucket, matched int) (bool, error) {
	n := 0
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		n++
	}
	return n == matched, nil
}

// bindingAgrees reports whether the preflight frame f has a compact
// binding record that names it and says what it says (verifyBindings'
// check of that record).
func (tx *Tx) bindingAgrees(f Frame) bool {
	var w struct {
		PreflightAttrs
		// The decision, the bulk of the frame, is not in the record: it
		// is skipped rather than copied.
		Decision struct{} `json:"decision"`
	}
	a := &w.PreflightAttrs
	if json.Unmarshal(f.Attrs, &w) != nil || a.PreflightID == "" {
		return false
	}
	v := tx.btx.Bucket(bucketPreflights).Get([]byte(a.PreflightID))
	if seq, ok := indexSeq(v); !ok || seq != f.Seq {
		return false
	}
	rec, err := decodeBindingRecord(a.PreflightID, v[8:])
	return err == nil && !recordDiffers(&rec, *a, f)
}

// The audit index is what GET /v1/audit/{audit_id} reads, so it is
// checked against the frames both ways: each frame with an audit id has
// its entry (during the walk), and the index holds no other entry
// (verifyAuditIndex). Compaction deletes a frame's entry with the frame,
// so no entry is left naming a removed one. An entry deleted (a decision
// hidden from the audit trail) or forged (a frame shown under another id)
// does not pass for a log that verifies.

// verifyAuditIndex checks that the audit index holds no entry besides the
// indexed ones the walk found, one per frame with an audit id. Entries are
// counted, not looked up, unless there are more: distinct frames have
// distinct entries, so equal counts leave no room for another one. Then it
// names the first entry whose frame is missing or has another audit id.
// On the way it counts the consumed markers the index holds beside its
// entries (format 3, markers.go), so they are not walked again to be
// counted; the count is whole when the index verifies.
func (tx *Tx) verifyAuditIndex(ctx context.Context, indexed int, rep *VerifyReport) (markers int, err error) {
	entries, extra := 0, false
	c := tx.btx.Bucket(bucketAudit).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if isMarker(v) {
			markers++ // verifyMarkers checks those
			continue
		}
		if n := len(k) - 9; n < 1 || k[n] != 0 {
			rep.Problem = fmt.Sprintf("audit index entry %q is malformed", k)
			return 0, nil
		}
		if entries++; entries > indexed {
			extra = true
			break
		}
	}
	if !extra {
		return markers, nil
	}
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if isMarker(v) {
			continue
		}
		n := len(k) - 9
		id, seq := string(k[:n]), binary.BigEndian.Uint64(k[n+1:])
		f, err := tx.Frame(seq)
		switch {
		case err != nil:
			rep.BadSeq, rep.Problem = seq, fmt.Sprintf("audit index entry of %s names no frame in the log", id)
			return 0, nil
		case f.AuditID != id:
			rep.BadSeq, rep.Problem = seq, fmt.Sprintf("audit index entry of %s names a frame of audit id %s", id, f.AuditID)
			return 0, nil
		}
	}
	rep.Problem = "the audit index holds more entries than the log has frames with an audit id"
	return 0, nil
}

// hasKey reports whether bucket b holds key k. Index entries hold empty
// values, and Get returns nil for an empty value put earlier in the same
// write transaction, as for a missing key; the cursor tells them apart.
func hasKey(b *bolt.Bucket, k []byte) bool {
	got, _ := b.Cursor().Seek(k)
	return bytes.Equal(got, k)
}

// names reports whether marker m is the one consumed frame a wrote (seq
// aside): the same request and args digest.
func (a *ConsumedAttrs) names(m *consumedRecord) bool {
	return a.RequestID == m.RequestID && a.ArgsDigest == m.ArgsDigest
}

// The consumed markers are what the gate reads to refuse a replay, so they
// are checked against the hash-chained frames both ways, without holding
// anything per frame: each autonomy.preflight_consumed frame of a
// preflight still recorded has its marker (checkConsumedFrame, during the
// walk), and each marker names the consumed frame of its preflight, step
// and request (verifyMarkers). A marker deleted (a step opened again) or
// forged does not pass for a log that verifies.

// checkConsumedFrame returns what is wrong with the marker of the consumed
// frame f, "" when nothing is or its preflight is no longer recorded;
// matched reports that the marker was found and names f.
func (tx *Tx) checkConsumedFrame(f Frame) (problem string, matched bool) {
	a, err := f.Consumed()
	if err != nil || a.PreflightID == "" {
		return fmt.Sprintf("consumed frame attrs do not name a preflight: %s", f.Attrs), false
	}
	b, err := tx.binding(a.PreflightID)
	switch {
	case errors.Is(err, ErrNotFound):
		return "", false // compacted together with its markers: nothing to check
	case err != nil:
		return fmt.Sprintf("the binding of %s cannot be read: %v", a.PreflightID, err), false
	}
	steps := b.Steps
	// Step ids are unique in any plan the service passes, but the wal API
	// takes any binding: the frame names its step by id only, so any step
	// with that id whose marker is this frame's will do.
	problem = fmt.Sprintf("consumes step %q, which preflight %s does not have", a.StepID, a.PreflightID)
	for i := range steps {
		if steps[i].ID != a.StepID {
			continue
		}
		var m consumedRecord
		v := tx.marker(b.AuditID, a.PreflightID, i)
		switch {
		case v == nil:
			problem = fmt.Sprintf("step %s of %s was consumed (this frame) but has no consumed marker: it could be consumed again", a.StepID, a.PreflightID)
		case json.Unmarshal(v, &m) != nil || m.Seq != f.Seq || m.At != f.Timestamp || !a.names(&m):
			problem = fmt.Sprintf("the consumed marker of step %s of %s differs from this frame", a.StepID, a.PreflightID)
		default:
			return "", true
		}
	}
	return problem, false
}

// verifyMarkers checks that each consumed marker names the consumed frame
// of its preflight, step and request.
func (tx *Tx) verifyMarkers(ctx context.Context, rep *VerifyReport) error {
	return tx.eachMarker(ctx, func(k []byte, auditID, id string, step int, okKey bool, v []byte) bool {
		var m consumedRecord
		if !okKey || json.Unmarshal(v, &m) != nil {
			rep.Problem = fmt.Sprintf("consumed marker %q is malformed", k)
			return false
		}
		bad := func(problem string) bool {
			rep.BadSeq, rep.Problem = m.Seq, fmt.Sprintf("consumed marker of %s step %d: %s", id, step, problem)
			return false
		}
		f, err := tx.Frame(m.Seq)
		if err != nil {
			return bad("names no frame in the log")
		}
		a, err := f.Consumed()
		if err != nil || a.PreflightID != id || m.At != f.Timestamp || !a.names(&m) || (auditID != "" && f.AuditID != auditID) {
			return bad("differs from the frame it names")
		}
		b, err := tx.binding(id)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return bad("its binding cannot be read: " + err.Error())
		}
		if err == nil && (step >= len(b.Steps) || b.Steps[step].ID != a.StepID) {
			return bad("names another step than the frame it names")
		}
		return true
	})
}

// verifyBindings checks every compact binding record in the preflights
// index against the hash-chained frame it names. The record is what the gate
// reads, so an edited record (a later expiry, another kind) must not pass
// for a log that verifies.
func (tx *Tx) verifyBindings(ctx context.Context, rep *VerifyReport) error {
	c := tx.btx.Bucket(bucketPreflights).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		seq, ok := indexSeq(v)
		if !ok {
			rep.Problem = fmt.Sprintf("preflights index entry %q is malformed", k)
			return nil
		}
		bad := func(problem string) error {
			rep.BadSeq, rep.Problem = seq, fmt.Sprintf("binding index of %s: %s", k, problem)
			return nil
		}
		rec, err := decodeBindingRecord(string(k), v[8:])
		if err != nil {
			return bad(err.Error())
		}
		a, f, err := tx.preflightFrame(seq)
		if err != nil {
			return bad("its frame cannot be read: " + err.Error())
		}
		if recordDiffers(&rec, a, f) {
			return bad("differs from its autonomy.preflight frame")
		}
	}
	return nil
}

// sameStep reports whether two bound steps say the same, approval included.
func sameStep(a, b preflight.BoundStep) bool {
	if a.ID != b.ID || a.Kind != b.Kind || a.ArgsDigest != b.ArgsDigest || (a.Approval == nil) != (b.Approval == nil) {
		return false
	}
	return a.Approval == nil || (slices.Equal(a.Approval.Authorities, b.Approval.Authorities) &&
		a.Approval.ExpiresAt.Equal(b.Approval.ExpiresAt))
}
