package main

// The -etcd runs: the service scenarios on the etcd backend, beside the
// bbolt figures of the same run.
//
//	etcd (txn)       a serial etcd transaction from this process (If the key
//	                 is absent, Then put it: the shape of a consume), the
//	                 etcd round trip the goals are judged with
//	etcd ×1          one replica on a local one-member etcd (its own process)
//	etcd ×3          three replicas on the same etcd; preflights, Checks and
//	                 replays go round-robin over them, and a fresh id is
//	                 consumed on the replica after the one its index names,
//	                 so most consumes land on another replica than the one
//	                 that answered the preflight
//
//	bbolt beside ×1  a bbolt service of its own, taking turns with etcd ×1
//	                 in rounds (-rounds), the bbolt side of the goals
//
// Goals (issue 18): consume at 64 on etcd ×1 ≥ 0.5 × consume at 64 on
// bbolt; serial consume p50 on etcd ×1 ≤ bbolt's + one etcd round trip
// (the serial transaction's p50). The bbolt figures are bbolt beside ×1's,
// or the main run's when that row is missing.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/contractrefine/autonomy/internal/etcdstore"
	"github.com/contractrefine/autonomy/internal/etcdtest"
)

// Targets and scenarios of the etcd runs.
const (
	targetEtcdStore = "etcd (txn)"
	targetEtcd1     = "etcd ×1"
	targetEtcd3     = "etcd ×3"
	// targetBesideEtcd is a bbolt service measured in turn with etcd ×1.
	targetBesideEtcd = "bbolt beside ×1"
	scEtcdTxn        = "txn put-if-absent"
	// scEtcdTxnBetween is the same transaction, one after each serial
	// consume on one replica, outside the consume's timing.
	scEtcdTxnBetween = "txn between consumes"
	etcdReplicas     = 3
)

// etcdRun starts a one-member etcd in a process of its own, measures its
// round trip, then runs the service scenarios on one replica and on
// etcdReplicas replicas at every concurrency.
func etcdRun(ctx context.Context, cfg settings, cl *client, rep *report, out io.Writer, dir string) error {
	fmt.Fprintln(out, "starting a one-member etcd ...")
	c, err := etcdtest.Start(etcdtest.Options{Kind: etcdtest.Process, Dir: filepath.Join(dir, "etcd")})
	if err != nil {
		return err
	}
	defer c.Close()
	eps := strings.Join(c.Endpoints(), ",")
	// The round trip is measured with the store's own client options, so
	// the floor is what the service's requests could cost.
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: etcdstore.DefaultDialTimeout,
		Logger: zap.NewNop(), DialOptions: etcdstore.DialOptions(etcdstore.DefaultDialTimeout)})
	if err != nil {
		return err
	}
	defer cli.Close()
	// putIfAbsent is the round trip: a transaction that puts a new key
	// if it is absent, as a consume's marker is put.
	putIfAbsent := func(ctx context.Context, k string) error {
		_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, "x")).Commit()
		return err
	}
	for _, conc := range cfg.conc {
		r := drive(ctx, conc, cfg.duration, 0, func(ctx context.Context, i int) error {
			return putIfAbsent(ctx, fmt.Sprintf("/load-txn/%d-%d", conc, i))
		})
		rep.add(out, targetEtcdStore, scEtcdTxn, r)
	}

	for _, n := range []int{1, etcdReplicas} {
		target := targetEtcd1
		if n > 1 {
			target = targetEtcd3
		}
		svcs := make([]*service, n)
		closeAll := func() {
			for _, s := range svcs {
				if s != nil {
					s.close()
				}
			}
		}
		for i := range svcs {
			rc := cfg
			rc.serviceArgs = append(append([]string(nil), cfg.serviceArgs...),
				"--etcd-endpoints", eps, "--replica-id", fmt.Sprintf("load-%d-%d", n, i))
			if svcs[i], err = newService(ctx, rc, cl, filepath.Join(dir, fmt.Sprintf("replicas-%d-%d", n, i)), i == 0); err != nil {
				closeAll()
				return err
			}
		}
		first := svcs[0]
		first.others = svcs[1:]
		first.etcd = c.Endpoints()[0]
		if n == 1 {
			// The round trip again, after each serial consume, for the
			// serial goal (judgeEtcd): the member's own fsync slows as the
			// consumes fill its log.
			first.between = &sampler{op: func() error {
				return putIfAbsent(ctx, fmt.Sprintf("/load-txn/between-%d", first.between.samples()))
			}}
		}
		// On one replica a bbolt service of its own takes turns with it
		// in rounds, so issue 18's ratios compare the two backends over
		// the same stretches of the machine's time (inRounds).
		var beside *service
		if n == 1 {
			if beside, err = newService(ctx, cfg, cl, filepath.Join(dir, "bbolt-beside"), true); err != nil {
				closeAll()
				return err
			}
			svcs = append(svcs, beside)
		}
		for _, conc := range cfg.conc {
			floorRate := rep.find(targetFloor, scFloorCheck, conc).PerSecond
			err := inRounds(rep, out, cfg.rounds, cfg.duration, func(part *report, d time.Duration) error {
				if beside != nil {
					if err := beside.scenarios(ctx, part, io.Discard, targetBesideEtcd, conc, floorRate, d); err != nil {
						return err
					}
				}
				return first.scenarios(ctx, part, io.Discard, target, conc, floorRate, d)
			})
			if err != nil {
				closeAll()
				return err
			}
		}
		if first.between.samples() > 0 {
			rep.add(out, targetEtcdStore, scEtcdTxnBetween, first.between.result())
		}
		closeAll()
	}
	return nil
}

// judgeEtcd works out the goals of issue 18 that this run measured.
func (rep *report) judgeEtcd(cfg settings) {
	if !cfg.etcd {
		return
	}
	for _, c := range cfg.conc {
		if c != 64 {
			continue
		}
		b, e := rep.bboltBesideEtcd(64), rep.find(targetEtcd1, scConsume, 64)
		if b.PerSecond > 0 {
			got := e.PerSecond / b.PerSecond
			g := goal{Name: "check consume at 64: etcd ×1 / bbolt throughput", Got: got, Want: ">= 0.5", Met: got >= 0.5,
				Notes: fmt.Sprintf("etcd ×1 %.0f/s, bbolt %.0f/s", e.PerSecond, b.PerSecond)}
			if e3 := rep.find(targetEtcd3, scConsume, 64); e3.PerSecond > 0 {
				g.Notes += fmt.Sprintf("; etcd ×3 %.0f/s (%.2f × etcd ×1)", e3.PerSecond, e3.PerSecond/e.PerSecond)
			}
			if t := rep.find(targetEtcdStore, scEtcdTxn, 64); t.PerSecond > 0 {
				g.Notes += fmt.Sprintf("; etcd alone takes %.0f put-if-absent txn/s at 64", t.PerSecond)
			}
			rep.Goals = append(rep.Goals, g)
		}
	}
	for _, c := range cfg.conc {
		if c != 1 {
			continue
		}
		b, e := rep.bboltBesideEtcd(1), rep.find(targetEtcd1, scConsume, 1)
		t, when := rep.find(targetEtcdStore, scEtcdTxnBetween, 1), "between the consumes"
		if t.P50Micros == 0 {
			t, when = rep.find(targetEtcdStore, scEtcdTxn, 1), "before the consumes"
		}
		if b.P50Micros > 0 && t.P50Micros > 0 {
			bound := b.P50Micros + t.P50Micros
			got := e.P50Micros / bound
			rep.Goals = append(rep.Goals, goal{Name: "check consume at 1: etcd ×1 p50 / (bbolt p50 + etcd txn p50)",
				Got: got, Want: "<= 1.0", Met: got <= 1.0,
				Notes: fmt.Sprintf("etcd ×1 p50 %.0f µs; bbolt %.0f µs + txn %.0f µs (%s) = %.0f µs",
					e.P50Micros, b.P50Micros, t.P50Micros, when, bound)})
		}
	}
}

// bboltBesideEtcd is the bbolt consume at conc that etcd ×1 is judged
// against: the one measured in turn with it, else the main run's.
func (rep *report) bboltBesideEtcd(conc int) result {
	if r := rep.find(targetBesideEtcd, scConsume, conc); r.Calls > 0 {
		return r
	}
	return rep.find(targetService, scConsume, conc)
}

// etcdCounts are etcd's request counters.
type etcdCounts struct {
	requests  float64 // KV requests answered (grpc_server_handled_total of etcdserverpb.KV)
	proposals float64 // raft entries committed (etcd_server_proposals_committed_total)
}

// etcdRequests reads etcd's counters from its /metrics at endpoint.
func etcdRequests(ctx context.Context, hc *http.Client, endpoint string) (etcdCounts, error) {
	families, err := metricFamilies(ctx, hc, endpoint)
	if err != nil {
		return etcdCounts{}, err
	}
	var c etcdCounts
	for _, m := range families["grpc_server_handled_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "grpc_service" && l.GetValue() == "etcdserverpb.KV" {
				c.requests += m.GetCounter().GetValue()
			}
		}
	}
	for _, m := range families["etcd_server_proposals_committed_total"].GetMetric() {
		c.proposals += m.GetGauge().GetValue()
	}
	if c.proposals == 0 {
		return c, fmt.Errorf("load: etcd's /metrics has no etcd_server_proposals_committed_total")
	}
	return c, nil
}
