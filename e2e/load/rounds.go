package main

import (
	"io"
	"slices"
	"time"
)

// inRounds runs round rounds times, each time for d/rounds per scenario,
// and adds each scenario's results, merged over the rounds, to rep in the
// order the first round made them. Targets that take turns within a round
// meet the same stretches of the machine's time: on a shared machine the
// floors' and the peers' throughput alone moves by half within minutes,
// which a ratio of figures taken a minute apart would carry whole.
func inRounds(rep *report, out io.Writer, rounds int, d time.Duration, round func(part *report, d time.Duration) error) error {
	slice := d / time.Duration(rounds)
	var merged []result
	for n := range rounds {
		part := &report{}
		if err := round(part, slice); err != nil {
			return err
		}
		for i, r := range part.Runs {
			if n == 0 {
				merged = append(merged, r)
				continue
			}
			if i < len(merged) {
				merged[i] = merged[i].merge(r)
			}
		}
	}
	for _, r := range merged {
		rep.add(out, r.Target, r.Scenario, r)
	}
	return nil
}

// merge is r and o, two slices of one scenario at one concurrency, as one
// result: calls over the time of both, percentiles of all the calls, and
// the per-call and per-commit figures weighted by what each slice made.
func (r result) merge(o result) result {
	m := summarize(r.Conc, slices.Concat(r.lat, o.lat), time.Duration((r.Seconds+o.Seconds)*float64(time.Second)))
	m.Target, m.Scenario = r.Target, r.Scenario
	m.Errors = r.Errors + o.Errors
	m.FirstError = r.FirstError
	if m.FirstError == "" {
		m.FirstError = o.FirstError
	}
	m.RanOutOfIDs = r.RanOutOfIDs || o.RanOutOfIDs
	calls := float64(m.Calls)
	if calls == 0 {
		return m
	}
	perCall := func(a, b float64) float64 { return (a*float64(r.Calls) + b*float64(o.Calls)) / calls }
	m.CPUMicros = perCall(r.CPUMicros, o.CPUMicros)
	m.SwitchesPerCall = perCall(r.SwitchesPerCall, o.SwitchesPerCall)
	m.EtcdRequestsPerCall = perCall(r.EtcdRequestsPerCall, o.EtcdRequestsPerCall)
	m.EtcdProposalsPerCall = perCall(r.EtcdProposalsPerCall, o.EtcdProposalsPerCall)
	rc, oc := r.CommitsPerCall*float64(r.Calls), o.CommitsPerCall*float64(o.Calls)
	if commits := rc + oc; commits > 0 {
		m.CommitsPerCall = commits / calls
		m.WritesPerCommit = (r.WritesPerCommit*rc + o.WritesPerCommit*oc) / commits
		m.CommitMicros = (r.CommitMicros*rc + o.CommitMicros*oc) / commits
	}
	return m
}
