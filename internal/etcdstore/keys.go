package etcdstore

import "fmt"

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
func (p keys) frame(auditID, replica string, seq uint64) string {
	return fmt.Sprintf("%s%s/%016x", p.frames(auditID), replica, seq)
}
func (p keys) copyIndexes(replica string) string { return string(p) + "r/" + replica + "/" }
func (p keys) copyIndex(replica string, seq uint64) string {
	return fmt.Sprintf("%s%016x", p.copyIndexes(replica), seq)
}
func (p keys) probe() string { return string(p) + "probe" }
