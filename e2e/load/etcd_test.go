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
	// The transaction sampled between the serial consumes, when there is
	// one, is the round trip the serial goal takes.
	between := &report{Runs: append(rep.Runs[:len(rep.Runs):len(rep.Runs)],
		result{Target: targetEtcdStore, Scenario: scEtcdTxnBetween, Conc: 1, P50Micros: 1500})}
	between.judgeEtcd(settings{etcd: true, conc: []int{1}})
	if len(between.Goals) != 1 || between.Goals[0].Got != 1 || !between.Goals[0].Met ||
		!strings.Contains(between.Goals[0].Notes, "between the consumes") {
		t.Errorf("latency goal with a sampled txn %+v, want 4500 / (3000 + 1500) = 1, met", between.Goals)
	}
	// The bbolt service measured in turn with etcd ×1, when there is one,
	// is the bbolt side of both goals.
	beside := &report{Runs: append(rep.Runs[:len(rep.Runs):len(rep.Runs)],
		result{Target: targetBesideEtcd, Scenario: scConsume, Conc: 64, Calls: 1, PerSecond: 3000},
		result{Target: targetBesideEtcd, Scenario: scConsume, Conc: 1, Calls: 1, P50Micros: 2000})}
	beside.judgeEtcd(settings{etcd: true, conc: []int{1, 64}})
	if len(beside.Goals) != 2 || beside.Goals[0].Got != 0.4 || beside.Goals[0].Met || beside.Goals[1].Got != 1.5 {
		t.Errorf("goals beside a bbolt service %+v, want 1200 / 3000 = 0.4 missed and 4500 / (2000 + 1000) = 1.5", beside.Goals)
	}
	none := &report{Runs: rep.Runs}
	none.judgeEtcd(settings{conc: []int{1, 64}})
	if len(none.Goals) != 0 {
		t.Errorf("without -etcd: goals %+v, want none", none.Goals)
	}
}

// TestLoadOnEtcdBriefly runs the load command's etcd mode for a moment at
// one caller: every etcd row is there, the round trip was sampled after
// each serial consume on one replica, those samples are not counted as the
// service's requests, and the serial goal took them.
func TestLoadOnEtcdBriefly(t *testing.T) {
	_, rep, _ := runBriefly(t, builtService(t), "-conc", "1", "-etcd", "-frames", "0")
	for _, target := range []string{targetEtcd1, targetEtcd3} {
		for _, sc := range []string{scPreflight, scConsume, scReplay, scNoHeader} {
			if r := rep.find(target, sc, 1); r.Calls == 0 || r.Errors != 0 || r.EtcdRequestsPerCall <= 0 {
				t.Errorf("%s / %s: %+v", target, sc, r)
			}
		}
	}
	for _, sc := range []string{scPreflight, scConsume, scReplay, scNoHeader} {
		if r := rep.find(targetBesideEtcd, sc, 1); r.Calls == 0 || r.Errors != 0 || r.CommitsPerCall <= 0 {
			t.Errorf("%s / %s: %+v", targetBesideEtcd, sc, r)
		}
	}
	consume, between := rep.find(targetEtcd1, scConsume, 1), rep.find(targetEtcdStore, scEtcdTxnBetween, 1)
	if between.Calls != consume.Calls || between.P50Micros <= 0 {
		t.Errorf("%d transactions sampled between %d consumes (p50 %.0f µs), want one after each",
			between.Calls, consume.Calls, between.P50Micros)
	}
	// A lone consume is one transaction; the samples would make it two.
	if got := consume.EtcdRequestsPerCall; got < 0.9 || got > 1.5 {
		t.Errorf("etcd ×1 consume: %.2f etcd requests per call, want about 1", got)
	}
	var judged bool
	for _, g := range rep.Goals {
		judged = judged || strings.Contains(g.Notes, "between the consumes")
	}
	if !judged {
		t.Errorf("no goal took the sampled round trip: %+v", rep.Goals)
	}
}
