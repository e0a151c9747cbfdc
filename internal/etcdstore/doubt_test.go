package etcdstore

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/wal"
)

// TestSettleDoubt: a consume answered 503 whose marker etcd applied later
// gets its consumed frame logged once, when the marker is its own; a
// marker not there yet settles nothing, and another call's marker settles
// the doubt with nothing logged.
func TestSettleDoubt(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	ctx := context.Background()
	b := recordSteps(t, s, "pf_doubt_1", 1)
	r := consumeIn(&b, "req-late")
	r.Decision = nil
	consumed := func() int {
		fs, err := s.log.AuditFramesOf(ctx, b.AuditID, []string{wal.KindConsumed})
		if err != nil {
			t.Fatal(err)
		}
		return len(fs)
	}
	if settled, err := s.settleDoubt(ctx, &r, 0); settled || err != nil {
		t.Fatalf("no marker yet: settled %v, %v; want not settled", settled, err)
	}
	put := func(id, req, replica string) {
		v, _ := json.Marshal(marker{RequestID: req, At: time.Now().UTC().Format(time.RFC3339Nano), Replica: replica})
		if _, err := s.cli.Put(ctx, s.p.marker(id, 0), string(v)); err != nil {
			t.Fatal(err)
		}
	}
	put(b.PreflightID, "req-late", "replica-a") // as etcd applies the late transaction
	for range 2 {
		if settled, err := s.settleDoubt(ctx, &r, 0); !settled || err != nil {
			t.Fatalf("its own marker: settled %v, %v", settled, err)
		}
		if n := consumed(); n != 1 {
			t.Fatalf("%d consumed frames, want the late consume's one", n)
		}
	}

	other := recordSteps(t, s, "pf_doubt_2", 1)
	ro := consumeIn(&other, "req-503")
	ro.Decision = nil
	put(other.PreflightID, "req-other", "replica-b")
	if settled, err := s.settleDoubt(ctx, &ro, 0); !settled || err != nil {
		t.Fatalf("another call's marker: settled %v, %v", settled, err)
	}
	if fs, _ := s.log.AuditFramesOf(ctx, other.AuditID, []string{wal.KindConsumed}); len(fs) != 0 {
		t.Fatalf("%d consumed frames logged for another call's marker", len(fs))
	}
	checkClean(t, s)
}

// TestFenceUnderALease: the fence is a record under a record lease (etcd
// keeps no key for every replica name that ever ran), and when it is gone
// (its lease ran out) a lone consume puts it again: no transaction
// requires it absent, so none sent before its expiry can pass.
func TestFenceUnderALease(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	ctx := context.Background()
	key := s.p.fence("replica-a")
	old, err := s.fence(ctx) // what the first lone consume requires
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 || resp.Kvs[0].ModRevision != old {
		t.Fatalf("the fence a lone consume requires: %v, %v; want one key at %d under a lease", resp.Kvs, err, old)
	}
	// Its lease runs out; the next lone consume's transaction, which
	// requires the old revision, fails its compare and is decided on
	// the shared path.
	if _, err := s.cli.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	b := recordSteps(t, s, "pf_fence_lease", 1)
	if res, err := s.Consume(ctx, consumeIn(&b, "req-1")); err != nil || res.Status != wal.Consumed {
		t.Fatalf("consume once the fence expired: %v, %v; want consumed", res.Status, err)
	}
	rev, err := s.fence(ctx)
	if err != nil || rev <= old {
		t.Fatalf("the fence a lone consume requires once the old one expired: %d, %v; want a new revision past %d", rev, err, old)
	}
	if resp, err := s.cli.Get(ctx, key); err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != rev || resp.Kvs[0].Lease == 0 {
		t.Fatalf("the fence put again: %v, %v; want it at %d under a lease", resp.Kvs, err, rev)
	}
	checkClean(t, s)
}

// TestStaleFence: a lone consume whose fence revision is stale (the key
// moved behind the replica's back) writes nothing in its own transaction,
// is then decided on the shared path, and the fence is read again.
func TestStaleFence(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	ctx := context.Background()
	rev, err := s.fence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Put(ctx, s.p.fence("replica-a"), "moved elsewhere"); err != nil {
		t.Fatal(err)
	}
	b := recordSteps(t, s, "pf_stale_fence", 1)
	res, err := s.Consume(ctx, consumeIn(&b, "req-fence"))
	if err != nil || res.Status != wal.Consumed {
		t.Fatalf("consume with a stale fence: %v, %v; want consumed", res.Status, err)
	}
	if now, err := s.fence(ctx); err != nil || now <= rev {
		t.Fatalf("fence after the stale one failed a transaction: %d, %v; want it read again past %d", now, err, rev)
	}
	checkClean(t, s)
}
