package etcdstore

import (
	"fmt"
	"slices"
)

// keys is the key prefix; its methods name every key (doc.go).
type keys string

func (p keys) binding(preflightID string) string { return string(p) + "b/" + preflightID }
func (p keys) audit(auditID string) string       { return string(p) + "a/" + auditID }
func (p keys) markers(preflightID string) string { return string(p) + "c/" + preflightID + "/" }
func (p keys) marker(preflightID string, step int) string {
	return fmt.Sprintf("%s%04d", p.markers(preflightID), step)
}
func (p keys) session(key string) string     { return string(p) + "s/" + key }
func (p keys) sessionLock(key string) string { return string(p) + "sl/" + key + "/" }
func (p keys) idempotency(key string) string { return string(p) + "i/" + key }
func (p keys) claim(key string) string       { return string(p) + "ic/" + key }
func (p keys) frames(auditID string) string  { return string(p) + "f/" + auditID + "/" }
func (p keys) replicaFrames(auditID, replica string) string {
	return p.frames(auditID) + replica + "/"
}
func (p keys) frame(auditID, replica string, seq uint64) string {
	return string(p.appendFrame(nil, auditID, replica, seq))
}

// appendFrame appends frame's key to b.
func (p keys) appendFrame(b []byte, auditID, replica string, seq uint64) []byte {
	b = slices.Grow(b, len(p)+len(auditID)+len(replica)+21)
	b = append(append(append(b, p...), "f/"...), auditID...)
	b = append(append(append(b, '/'), replica...), '/')
	return appendSeq(b, seq)
}
func (p keys) copyIndexes(replica string) string { return string(p) + "r/" + replica + "/" }
func (p keys) fence(replica string) string       { return string(p) + "e/" + replica }
func (p keys) presence(replica string) string    { return string(p) + "l/" + replica }
func (p keys) copyIndex(replica string, seq uint64) string {
	return string(appendSeq([]byte(p.copyIndexes(replica)), seq))
}

// appendSeq appends seq as 16 hex digits, as %016x writes it.
func appendSeq(b []byte, seq uint64) []byte {
	var h [16]byte
	for i := len(h) - 1; i >= 0; i-- {
		h[i] = "0123456789abcdef"[seq&0xf]
		seq >>= 4
	}
	return append(b, h[:]...)
}
func (p keys) probe() string { return string(p) + "probe" }
