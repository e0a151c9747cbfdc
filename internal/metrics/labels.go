package metrics

import (
	"sync"

	"github.com/contractrefine/autonomy/preflight"
)

// knownReasons are the reasons the service itself emits: the catalog's, the
// ladder's, the clauses' and the gate's. They always get their own label
// value; only reasons outside this set (the operator's policy reasons) count
// against MaxExtraReasons.
var knownReasons = preflight.Reasons()

// knownCodes are the error codes the HTTP API, its access check, the gate
// and the built-in gateway answer with.
var knownCodes = append(preflight.Codes(), preflight.Subreason(preflight.ReasonVerifierUnavailable))

// labelSet bounds the values one label takes: the known values, plus the
// first limit others seen; anything later becomes OtherReason. The fast path
// is a lock-free map load.
type labelSet struct {
	values sync.Map // value -> struct{}
	mu     sync.Mutex
	extra  int
	limit  int
}

func (l *labelSet) init(limit int, known ...string) {
	l.limit = limit
	for _, v := range known {
		l.values.Store(v, struct{}{})
	}
}

// value returns v when it is known or fits under the limit, else OtherReason.
func (l *labelSet) value(v string) string {
	if _, ok := l.values.Load(v); ok {
		return v
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.values.Load(v); ok {
		return v
	}
	if l.extra >= l.limit {
		return OtherReason
	}
	l.extra++
	l.values.Store(v, struct{}{})
	return v
}
