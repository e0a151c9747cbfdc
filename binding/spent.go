package binding

import "github.com/contractrefine/autonomy/wal"

// spentStep is what this process knows of one step's consumed marker.
type spentStep struct {
	known     bool   // the marker is durable: this process wrote or read it
	requestID string // the x-request-id that consumed the step
}

// markSpent records that step i of e, of n steps, is consumed by
// requestID. It is called only after the store's commit of the marker
// returned, or with a marker the store read, so the entry never knows a
// step as consumed before the store does. Markers are never taken back
// while a binding can still be used (compaction removes them only after
// the binding expired), so what an entry knows stays true.
func (e *entry) markSpent(n, i int, requestID string) {
	e.markAll(n, []wal.SpentStep{{Index: i, RequestID: requestID}})
}

// learn records what a store's answer res, to a call with requestID, says
// is spent of e's n steps: the step it consumed or repeated, or on a
// replay the markers the store read.
func (e *entry) learn(res wal.ConsumeResult, requestID string, n int) {
	switch res.Status {
	case wal.Consumed, wal.Repeated:
		e.markSpent(n, res.StepIndex, requestID)
	case wal.Replay:
		e.markAll(n, res.Spent)
	}
}

// markAll records every step of steps spent, by its request id; e's
// binding has n steps.
func (e *entry) markAll(n int, steps []wal.SpentStep) {
	if len(steps) == 0 {
		return
	}
	for {
		old := e.spent.Load()
		spent := make([]spentStep, n)
		if old != nil {
			copy(spent, *old)
		}
		for _, s := range steps {
			if s.Index >= 0 && s.Index < len(spent) {
				spent[s.Index] = spentStep{known: true, requestID: s.RequestID}
			}
		}
		if e.spent.CompareAndSwap(old, &spent) {
			return
		}
	}
}

// inherit gives e what old, an earlier entry of the same binding (of n
// steps), knew spent. e is new and not yet shared with another call, or
// already knows the same: knowledge of a marker only ever grows.
func (e *entry) inherit(old *entry, n int) {
	p := old.spent.Load()
	if p == nil || len(*p) != n || old.id() != e.id() {
		return
	}
	e.spent.CompareAndSwap(nil, p)
}

// knownPlan answers what wal.Tx.plan would answer for r from the entry
// alone, when that answer is a deny it can be sure of: Mismatch (no step of
// the kind has the args, a property of the binding) or Replay (every
// matching step is known consumed, by other request ids). Otherwise ok is
// false and the store is asked: a step not known consumed may be free, and
// a repeated request id is answered by the store's record.
func (e *entry) knownPlan(r *wal.ConsumeRequest) (status wal.ConsumeStatus, ok bool) {
	var spent []spentStep
	if p := e.spent.Load(); p != nil {
		spent = *p
	}
	matched := false
	steps := r.Binding.Steps // e's binding
	for i := range steps {
		if !r.Admits(i, &steps[i]) {
			continue
		}
		matched = true
		if spent == nil || !spent[i].known {
			return 0, false
		}
		if r.RequestID != "" && spent[i].requestID == r.RequestID {
			return 0, false
		}
	}
	if !matched {
		return wal.Mismatch, true
	}
	return wal.Replay, true
}
