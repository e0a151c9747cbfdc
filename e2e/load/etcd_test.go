package main

import (
	"strings"
	"testing"
)

// TestJudgeEtcd: the two goals of the etcd runs are taken from the rows
// of the same run, and say met or missed as the ratios do.
func TestJudgeEtcd(t *testing.T) {
	rep := &report{Runs: []result{
		{Target: targetService, Scenario: scConsume, Conc: 64, PerSecond: 2000},
		{Target: targetEtcd1, Scenario: scConsume, Conc: 64, PerSecond: 1200},
		{Target: targetEtcd3, Scenario: scConsume, Conc: 64, PerSecond: 600},
		{Target: targetEtcdStore, Scenario: scEtcdTxn, Conc: 64, PerSecond: 9000},
		{Target: targetService, Scenario: scConsume, Conc: 1, P50Micros: 3000},
		{Target: targetEtcdStore, Scenario: scEtcdTxn, Conc: 1, P50Micros: 1000},
		{Target: targetEtcd1, Scenario: scConsume, Conc: 1, P50Micros: 4500},
	}}
	rep.judgeEtcd(settings{etcd: true, conc: []int{1, 64}})
	if len(rep.Goals) != 2 {
		t.Fatalf("goals %+v, want two", rep.Goals)
	}
	tp, lat := rep.Goals[0], rep.Goals[1]
	if tp.Got != 0.6 || !tp.Met || !strings.Contains(tp.Notes, "etcd ×3 600/s") {
		t.Errorf("throughput goal %+v, want 0.6 met, naming etcd ×3", tp)
	}
	if lat.Got != 1.125 || lat.Met {
		t.Errorf("latency goal %+v, want 4500 / (3000 + 1000) = 1.125, missed", lat)
	}
	none := &report{Runs: rep.Runs}
	none.judgeEtcd(settings{conc: []int{1, 64}})
	if len(none.Goals) != 0 {
		t.Errorf("without -etcd: goals %+v, want none", none.Goals)
	}
}
