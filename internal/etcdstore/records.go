package etcdstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// bindingRecord is the JSON before the decision bytes in P b/<id>.
type bindingRecord struct {
	AuditID   string                `json:"audit_id"`
	Outcome   preflight.Outcome     `json:"outcome"`
	ActorID   string                `json:"actor_id"`
	Tenant    string                `json:"tenant,omitempty"`
	ExpiresAt time.Time             `json:"expires_at"`
	Steps     []preflight.BoundStep `json:"steps"`
	Replica   string                `json:"replica"`
	// OutputMaxBytes is the envelope's outputContract.maxBytes, for the
	// replica that judges the tool's response.
	OutputMaxBytes *int64 `json:"output_max_bytes,omitempty"`
}

// sessionRecord is P s/<key>.
type sessionRecord struct {
	Attempts   int `json:"attempts"`
	RepairFrom int `json:"repair_from,omitempty"`
}

func encodeBinding(rec *wal.PreflightRecord, replica string) []byte {
	b, decision := &rec.Binding, rec.Decision
	meta, _ := json.Marshal(bindingRecord{AuditID: b.AuditID, Outcome: b.Outcome, ActorID: b.ActorID,
		Tenant: b.Tenant, ExpiresAt: b.ExpiresAt.UTC(), Steps: b.Steps, Replica: replica,
		OutputMaxBytes: rec.OutputMaxBytes})
	// encoding/json never writes a raw newline, so the first one ends it.
	out := make([]byte, 0, len(meta)+1+len(decision))
	out = append(out, meta...)
	out = append(out, '\n')
	return append(out, decision...)
}

func decodeBinding(id string, v []byte) (preflight.Binding, []byte, error) {
	b, _, d, err := decodeBindingRecord(id, v)
	return b, d, err
}

// decodeBindingRecord is decodeBinding with the record's own fields.
func decodeBindingRecord(id string, v []byte) (preflight.Binding, bindingRecord, []byte, error) {
	i := bytes.IndexByte(v, '\n')
	if i < 0 {
		return preflight.Binding{}, bindingRecord{}, nil, fmt.Errorf("%w: binding %s has no decision", wal.ErrCorrupt, id)
	}
	var r bindingRecord
	if err := json.Unmarshal(v[:i], &r); err != nil {
		return preflight.Binding{}, r, nil, fmt.Errorf("%w: binding %s: %v", wal.ErrCorrupt, id, err)
	}
	b := preflight.Binding{PreflightID: id, AuditID: r.AuditID, Outcome: r.Outcome, ActorID: r.ActorID,
		Tenant: r.Tenant, ExpiresAt: r.ExpiresAt.UTC(), Steps: r.Steps}
	return b, r, v[i+1:], nil
}

// withLease runs a write with the current bucket's lease, granting one
// again once when etcd no longer knows the cached one.
func (s *Store) withLease(ctx context.Context, write func(clientv3.LeaseID) error) error {
	for try := 0; ; try++ {
		now := s.now()
		id, ok := s.leases.cached(now)
		if !ok {
			lctx, cancel := s.opCtx(ctx)
			var err error
			id, err = s.leases.current(lctx, now)
			if err != nil {
				// Only a grant reaches etcd: a cached lease says nothing of it.
				err = s.seen(lctx, err)
			}
			cancel()
			if err != nil {
				return err
			}
		}
		err := write(id)
		if try == 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			s.leases.forget(id)
			continue
		}
		return err
	}
}

// RecordPreflight writes the autonomy.preflight frame to the replica's log,
// then, in one etcd transaction, the binding, the audit id's outcome, the
// session attempt, the idempotency record and the frame's copy. A session
// counted or a key recorded since they were read is wal.ErrConflict; the
// frame then stays in the local log alone.
func (s *Store) RecordPreflight(ctx context.Context, rec wal.PreflightRecord) (wal.Frame, error) {
	if err := s.owned(ctx); err != nil {
		return wal.Frame{}, err
	}
	b := &rec.Binding
	frame, err := s.log.AppendPreflight(ctx, rec)
	if err != nil {
		return wal.Frame{}, err
	}
	// The values are encoded once; only the guards are read again on a
	// retry.
	bindingValue, frameValue := string(encodeBinding(&rec, s.o.Replica)), string(wal.EncodeFrame(&frame))
	var idemValue string
	if rec.Idempotency != nil {
		v, _ := json.Marshal(rec.Idempotency)
		idemValue = string(v)
	}
	for try := 0; try < 8; try++ {
		var cmps []clientv3.Cmp
		var sessVal string
		if rec.SessionKey != "" || rec.Idempotency != nil {
			st, err := s.guardsOf(ctx, &rec, try == 0)
			if err != nil {
				return wal.Frame{}, err
			}
			if rec.SessionKey != "" {
				if rec.SessionAttempt > 0 && st.sess.Attempts != rec.SessionAttempt-1 {
					return wal.Frame{}, wal.ErrConflict
				}
				next := st.sess
				next.Attempts++
				if next.RepairFrom == 0 && b.Outcome == preflight.OutcomeRepairRequired {
					next.RepairFrom = next.Attempts
				}
				v, _ := json.Marshal(sessionRecord{Attempts: next.Attempts, RepairFrom: next.RepairFrom})
				sessVal = string(v)
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.p.session(rec.SessionKey)), "=", st.sessRev))
			}
			if rec.Idempotency != nil {
				if st.idemRev != 0 && st.idem.PreflightID != rec.IdempotencyReplaces {
					return wal.Frame{}, wal.ErrConflict
				}
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.p.idempotency(rec.Idempotency.Key)), "=", st.idemRev))
			}
		}
		// The holder of the session's lock releases it in the same write:
		// once the record is in, the next submission may read it.
		lockKey := s.heldLockKey(rec.SessionKey)
		claim := s.heldClaimOf(rec.Idempotency)
		ok, err := s.write(ctx, newCondWrite(cmps, func(l clientv3.OpOption) []clientv3.Op {
			ops := []clientv3.Op{
				clientv3.OpPut(s.p.binding(b.PreflightID), bindingValue, l),
				clientv3.OpPut(s.p.audit(b.AuditID), auditValue(b.Outcome, b.Tenant), l),
				clientv3.OpPut(s.p.frame(frame.AuditID, s.o.Replica, frame.Seq), frameValue, l),
			}
			if rec.SessionKey != "" {
				ops = append(ops, clientv3.OpPut(s.p.session(rec.SessionKey), sessVal, l))
			}
			ops = append(ops, s.pendingApprovalOps(&rec, l)...)
			if rec.Idempotency != nil {
				ops = append(ops, clientv3.OpPut(s.p.idempotency(rec.Idempotency.Key), idemValue, l))
			}
			if lockKey != "" {
				ops = append(ops, clientv3.OpDelete(lockKey))
			}
			if claim != nil {
				// Only this claim is removed, never a later one of the key.
				ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(claim.claimKey), "=", claim.rev)},
					[]clientv3.Op{clientv3.OpDelete(claim.claimKey)}, nil))
			}
			return ops
		}))
		s.recorded(rec.SessionKey, rec.Idempotency, ok)
		if err != nil {
			return wal.Frame{}, err
		}
		if ok {
			s.remember(b, wal.OutputLimit(rec.OutputMaxBytes))
			return frame, nil
		}
		// A guard moved between the read and the write: read again; an
		// attempt or key that no longer holds is refused above.
	}
	return wal.Frame{}, wal.ErrConflict
}

// guards is what a preflight's write is conditioned on.
type guards struct {
	sess    wal.Session
	sessRev int64
	idem    wal.IdempotencyRecord
	idemRev int64
}

// guardsOf is readGuards, or, on a first try by the holder of the
// session's lock with no idempotency record to write, the guard read when
// the lock was taken.
func (s *Store) guardsOf(ctx context.Context, rec *wal.PreflightRecord, first bool) (guards, error) {
	if !first {
		return s.readGuards(ctx, rec)
	}
	var g guards
	if rec.SessionKey != "" {
		sg, ok := s.heldGuard(rec.SessionKey)
		if !ok {
			return s.readGuards(ctx, rec)
		}
		g.sess, g.sessRev = sg.sess, sg.rev
	}
	if rec.Idempotency != nil {
		r, _, rev, ok := s.heldRecord(rec.Idempotency.Key)
		if !ok {
			return s.readGuards(ctx, rec)
		}
		g.idem, g.idemRev = r, rev
	}
	return g, nil
}

// heldLockKey is the etcd key of the session's lock, when this process
// holds it and has not released it yet; "" otherwise.
func (s *Store) heldLockKey(key string) string {
	if key == "" {
		return ""
	}
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if h := s.held[key]; h != nil && !h.released {
		return h.lockKey
	}
	return ""
}

// recorded tells the session's lock that its holder's write was sent:
// the guard it learnt is stale either way (the write may have committed
// even on an error), and a write that committed released the lock.
func (s *Store) recorded(key string, idem *wal.IdempotencyRecord, committed bool) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if h := s.held[key]; key != "" && h != nil {
		h.known = false
		h.released = h.released || committed
	}
	if idem == nil {
		return
	}
	if c := s.claims[idem.Key]; c != nil {
		c.known = false
		c.released = c.released || committed
	}
}

// heldClaimOf is the claim this process holds on the key of idem and has
// not released yet; nil otherwise.
func (s *Store) heldClaimOf(idem *wal.IdempotencyRecord) *heldClaim {
	if idem == nil {
		return nil
	}
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if c := s.claims[idem.Key]; c != nil && !c.released {
		return c
	}
	return nil
}

// readGuards reads the session counters and the idempotency record in
// one request.
func (s *Store) readGuards(ctx context.Context, rec *wal.PreflightRecord) (guards, error) {
	var g guards
	var ops []clientv3.Op
	if rec.SessionKey != "" {
		ops = append(ops, clientv3.OpGet(s.p.session(rec.SessionKey)))
	}
	if rec.Idempotency != nil {
		ops = append(ops, clientv3.OpGet(s.p.idempotency(rec.Idempotency.Key)))
	}
	resp, err := s.thenTxn(ctx, ops...)
	if err != nil {
		return g, err
	}
	i := 0
	if rec.SessionKey != "" {
		if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
			sg, err := decodeSession(rec.SessionKey, kvs[0].Value, kvs[0].ModRevision)
			if err != nil {
				return g, err
			}
			g.sess, g.sessRev = sg.sess, sg.rev
		}
		i++
	}
	if rec.Idempotency != nil {
		if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
			if err := json.Unmarshal(kvs[0].Value, &g.idem); err != nil {
				return g, fmt.Errorf("%w: idempotency record: %v", wal.ErrCorrupt, err)
			}
			g.idemRev = kvs[0].ModRevision
		}
	}
	return g, nil
}

// get reads one key; wal.ErrNotFound when it does not exist.
func (s *Store) get(ctx context.Context, key string) ([]byte, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(octx, key)
	if err = s.seen(octx, err); err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, wal.ErrNotFound
	}
	return resp.Kvs[0].Value, nil
}

// Binding returns the binding recorded for a preflight id.
func (s *Store) Binding(ctx context.Context, preflightID string) (preflight.Binding, error) {
	var b preflight.Binding
	_, err := s.recentOf(ctx, preflightID, &b)
	return b, err
}

// Decision returns the decision bytes exactly as recorded. They are read
// from etcd each time: the cache keeps none (recentBindings).
func (s *Store) Decision(ctx context.Context, preflightID string) ([]byte, error) {
	v, err := s.get(ctx, s.p.binding(preflightID))
	if err != nil {
		return nil, err
	}
	_, d, err := decodeBinding(preflightID, v)
	return d, err
}

// recentBindings bounds the bindings remember keeps: a one-step binding
// packed (wal.PackBinding) holds one string of about 300 bytes and its
// cache entry, so a full cache holds about 25 MB, nearly all of it bytes
// the collector does not scan. It is sized so that a replica that
// recorded a preflight reads it back only when more than this many
// preflights came between the record and the call: at 1,000 preflights a
// second, a minute of them.
const recentBindings = 1 << 16

// recentBinding is a binding as remember keeps it, until its expiry: the
// form the gate's cache keeps too (wal.PackBinding), one string rather
// than a preflight.Binding, its steps and their strings. A cache of
// decoded bindings doubled what the collector marks on every cycle at 64
// callers (docs/PERFORMANCE.md, "Packed recent bindings").
type recentBinding struct {
	packed         string
	expires        time.Time // the binding's expiry
	outputMaxBytes int64
}

// remember keeps a binding this replica recorded or read, packed, until it
// expires: a binding never changes once recorded, and its lease outlives
// its expiry (record_ttl is never below the binding window), so until
// then it is what etcd would answer. The preflight's own replica then
// reads nothing to check a call under it.
func (s *Store) remember(b *preflight.Binding, outputMaxBytes int64) {
	r := recentBinding{packed: wal.PackBinding(b), expires: b.ExpiresAt, outputMaxBytes: outputMaxBytes}
	s.recent.Add(wal.PackedID(r.packed), r) // the key is a substring of the entry: no caller's string is kept
}

// recentOf is the output limit of a binding and, when b is not nil, the
// binding in b, from remember's cache or etcd. A cached binding that does
// not unpack is read from etcd again.
func (s *Store) recentOf(ctx context.Context, id string, b *preflight.Binding) (int64, error) {
	if r, ok := s.recent.Get(id); ok && s.now().Before(r.expires) {
		if b == nil || wal.UnpackBinding(r.packed, b, nil) == nil {
			return r.outputMaxBytes, nil
		}
	}
	v, err := s.get(ctx, s.p.binding(id))
	if err != nil {
		return 0, err
	}
	rb, rec, _, err := decodeBindingRecord(id, v)
	if err != nil {
		return 0, err
	}
	limit := wal.OutputLimit(rec.OutputMaxBytes)
	s.remember(&rb, limit)
	if b != nil {
		*b = rb
	}
	return limit, nil
}

// ChainStatus reports whether a preflight of tenant was recorded under
// auditID and whether it passed (preflight.ChainResolver).
func (s *Store) ChainStatus(ctx context.Context, auditID, tenant string) (found, passed bool, err error) {
	v, err := s.get(ctx, s.p.audit(auditID))
	if errors.Is(err, wal.ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	outcome, recorded, _ := strings.Cut(string(v), "\n")
	if recorded != tenant {
		return false, false, nil
	}
	return true, preflight.Outcome(outcome) == preflight.OutcomePass, nil
}

// auditValue is the value of P a/<audit_id>: the preflight's outcome,
// followed by a newline and its tenant when it has one.
func auditValue(outcome preflight.Outcome, tenant string) string {
	if tenant == "" {
		return string(outcome)
	}
	return string(outcome) + "\n" + tenant
}

// Session returns a repair session's counters; the zero Session when none.
// The holder of the session's lock gets them as read when it took the lock
// (heldSession), with no request.
func (s *Store) Session(ctx context.Context, key string) (wal.Session, error) {
	if g, ok := s.heldGuard(key); ok {
		return g.sess, nil
	}
	v, err := s.get(ctx, s.p.session(key))
	if errors.Is(err, wal.ErrNotFound) {
		return wal.Session{}, nil
	}
	if err != nil {
		return wal.Session{}, err
	}
	g, err := decodeSession(key, v, 0)
	return g.sess, err
}

// decodeSession reads a session's record, read at revision rev.
func decodeSession(key string, v []byte, rev int64) (sessionGuard, error) {
	var r sessionRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return sessionGuard{}, fmt.Errorf("%w: session %s: %v", wal.ErrCorrupt, key, err)
	}
	return sessionGuard{sess: wal.Session{Attempts: r.Attempts, RepairFrom: r.RepairFrom}, rev: rev}, nil
}

// Idempotency returns the record of an idempotency key. The holder of the
// key's claim gets it as read when it took the claim (heldClaim), with no
// request.
func (s *Store) Idempotency(ctx context.Context, key string) (wal.IdempotencyRecord, error) {
	if r, found, _, ok := s.heldRecord(key); ok {
		if !found {
			return wal.IdempotencyRecord{}, wal.ErrNotFound
		}
		return r, nil
	}
	v, err := s.get(ctx, s.p.idempotency(key))
	if err != nil {
		return wal.IdempotencyRecord{}, err
	}
	var r wal.IdempotencyRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return wal.IdempotencyRecord{}, fmt.Errorf("%w: idempotency record: %v", wal.ErrCorrupt, err)
	}
	r.Key = key
	return r, nil
}
