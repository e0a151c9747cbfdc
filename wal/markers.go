package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Where a log keeps its consumed markers. Format 3 keeps each in the audit
// index, after the entries of its preflight's audit id:
//
//	audit  key: audit_id 0x01 preflight_id 0x00 step (2-byte BE)  value: the marker
//
// A consume writes its marker and the index entries of its two frames
// (audit_id 0x00 seq) under one audit id, so all three land in one leaf of
// one tree, where the consumed bucket of formats 1 and 2 cost a leaf and
// the branches above it of a tree of their own in every consume's commit
// (docs/PERFORMANCE.md, "Commit pages"). An entry's value is empty and a
// marker's never is (its JSON), which tells them apart whatever bytes an
// audit id holds: a log written before audit ids were refused a 0x00 or
// 0x01 byte may hold entries whose audit id does. A marker's audit id is
// its preflight's, which the service makes (internal/ids), so the first
// 0x01 in its key ends it. A log of format 1 or 2 keeps its markers in the consumed
// bucket (key preflight_id 0x00 step); a writable Open moves them here and
// deletes that bucket, so a log has the bucket exactly while it is of
// format 1 or 2, and every reader asks the bucket (legacyMarkers).

// legacyMarkers is the consumed bucket of a log of format 1 or 2, nil in
// a log of format 3.
func (tx *Tx) legacyMarkers() *bolt.Bucket { return tx.btx.Bucket(bucketConsumed) }

// markerKey is the key of the marker of step of preflightID, whose audit
// id is auditID, in a log of format 3.
func markerKey(auditID, preflightID string, step int) []byte {
	k := make([]byte, 0, len(auditID)+len(preflightID)+4)
	k = append(k, auditID...)
	k = append(k, 1)
	k = append(k, preflightID...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint16(k, uint16(step))
}

// splitMarkerKey reverses markerKey; ok is false for any other key,
// an audit index entry among them.
func splitMarkerKey(k []byte) (auditID, preflightID string, step int, ok bool) {
	i := bytes.IndexAny(k, "\x00\x01")
	if i < 1 || k[i] != 1 {
		return "", "", 0, false
	}
	preflightID, step, ok = splitConsumedKey(k[i+1:])
	if !ok || preflightID == "" {
		return "", "", 0, false
	}
	return string(k[:i]), preflightID, step, true
}

// isMarker reports whether an audit index value is a marker's: an index
// entry's is empty.
func isMarker(v []byte) bool { return len(v) > 0 }

// marker reads the marker of step of preflightID (audit id auditID), nil
// when there is none.
func (tx *Tx) marker(auditID, preflightID string, step int) []byte {
	if b := tx.legacyMarkers(); b != nil {
		return b.Get(consumedKey(preflightID, step))
	}
	return tx.btx.Bucket(bucketAudit).Get(markerKey(auditID, preflightID, step))
}

// putMarker writes the marker of step of preflightID (audit id auditID).
func (tx *Tx) putMarker(auditID, preflightID string, step int, v []byte) error {
	if b := tx.legacyMarkers(); b != nil {
		return b.Put(consumedKey(preflightID, step), v)
	}
	return tx.btx.Bucket(bucketAudit).Put(markerKey(auditID, preflightID, step), v)
}

// deleteMarkers removes every marker of preflightID (audit id auditID)
// and returns how many there were.
func (tx *Tx) deleteMarkers(auditID, preflightID string) (int, error) {
	b, prefix := tx.legacyMarkers(), append([]byte(preflightID), 0)
	if b == nil {
		b, prefix = tx.btx.Bucket(bucketAudit), markerKey(auditID, preflightID, 0)[:len(auditID)+len(preflightID)+2]
	}
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if len(k) == len(prefix)+2 {
			keys = append(keys, bytes.Clone(k))
		}
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(keys), nil
}

// eachMarker calls fn with every marker of the log, in key order, until fn
// returns false. key is the marker's key as stored; auditID is "" in a log
// of format 1 or 2, whose keys do not hold it. A key of the consumed bucket
// that is not a marker's is reported with ok false.
func (tx *Tx) eachMarker(ctx context.Context, fn func(key []byte, auditID, preflightID string, step int, ok bool, v []byte) bool) error {
	legacy := tx.legacyMarkers()
	b := legacy
	if b == nil {
		b = tx.btx.Bucket(bucketAudit)
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		var (
			auditID, preflightID string
			step                 int
			ok                   bool
		)
		if legacy != nil {
			preflightID, step, ok = splitConsumedKey(k)
		} else if !isMarker(v) {
			continue
		} else {
			auditID, preflightID, step, ok = splitMarkerKey(k)
		}
		if !fn(k, auditID, preflightID, step, ok, v) {
			return nil
		}
	}
	return nil
}

// markerCount is how many markers the log holds.
func (tx *Tx) markerCount(ctx context.Context) (int, error) {
	if b := tx.legacyMarkers(); b != nil {
		return b.Stats().KeyN, nil
	}
	n := 0
	err := tx.eachMarker(ctx, func([]byte, string, string, int, bool, []byte) bool { n++; return true })
	return n, err
}

// moveMarkers makes a log of format 1 or 2 keep its markers as format 3
// does: each goes into the audit index under its preflight's audit id,
// read from the preflight's binding record, and the consumed bucket goes.
// A marker whose preflight is no longer recorded means nothing (a consume
// of it is Gone) and is dropped; one whose record cannot be read fails the
// open, as that record would fail every read of it.
func moveMarkers(btx *bolt.Tx) (moved, dropped int, err error) {
	tx := &Tx{btx: btx}
	legacy := tx.legacyMarkers()
	if legacy == nil {
		return 0, 0, nil
	}
	audit := btx.Bucket(bucketAudit)
	c := legacy.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		id, step, ok := splitConsumedKey(k)
		if !ok {
			return 0, 0, fmt.Errorf("%w: consumed marker %q is malformed", ErrCorrupt, k)
		}
		b, err := tx.binding(id)
		switch {
		case errors.Is(err, ErrNotFound):
			dropped++
			continue
		case err != nil:
			return 0, 0, err
		}
		if err := audit.Put(markerKey(b.AuditID, id, step), bytes.Clone(v)); err != nil {
			return 0, 0, err
		}
		moved++
	}
	return moved, dropped, btx.DeleteBucket(bucketConsumed)
}
