package cli

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/contractrefine/autonomy/internal/etcdstore"
	"github.com/contractrefine/autonomy/internal/etcdtest"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// TestWALCheckStore runs wal check-store against a real etcd: clean after a
// preflight and its consume; a deleted etcd key is a frame without its
// state; a WAL that lacks frames leaves records naming frames it does not
// have: the consume's copies are pending when the log is as a kill during
// their commit leaves it (a second data directory holding the log as it
// was before the consume), and copies without frames when it is older
// still (a third, the log before the preflight). A mismatch exits 1.
func TestWALCheckStore(t *testing.T) {
	c := etcdtest.StartT(t, etcdtest.Options{})
	ctx := context.Background()
	dirA, dirB, dirC := t.TempDir(), t.TempDir(), t.TempDir()
	db, err := wal.Open(dirA, &wal.Options{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := etcdstore.Open(etcdstore.Options{Endpoints: c.Endpoints(), Replica: "replica-a", Log: db})
	if err != nil {
		t.Fatal(err)
	}
	// dirC: the log before the preflight.
	copyFile(t, filepath.Join(dirA, wal.FileName), filepath.Join(dirC, wal.FileName))
	b := preflight.Binding{PreflightID: "pf_checkstore_000001", AuditID: "au_checkstore_000001", Outcome: preflight.OutcomePass,
		ActorID: "user:a", ExpiresAt: time.Now().Add(time.Hour),
		Steps: []preflight.BoundStep{{ID: "s1", Kind: "refund.create", ArgsDigest: "sha256:x"}}}
	if _, err := st.RecordPreflight(ctx, wal.PreflightRecord{Binding: b, Decision: []byte(`{}`), Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// dirB: the log as it was before the consume.
	copyFile(t, filepath.Join(dirA, wal.FileName), filepath.Join(dirB, wal.FileName))
	res, err := st.Consume(ctx, wal.ConsumeRequest{Binding: &b, Kind: "refund.create", RequestID: "r1", Time: time.Now(),
		Decision: func(wal.ConsumeResult) wal.FrameInput {
			return wal.FrameInput{Kind: wal.KindDecision, AuditID: b.AuditID, Time: time.Now(), Attrs: map[string]any{"outcome": "allow"}}
		}})
	if err != nil || res.Status != wal.Consumed {
		t.Fatalf("consume: %+v, %v", res, err)
	}
	st.Close()
	db.Close()

	check := func(dir string, wantCode int) etcdstore.CheckReport {
		t.Helper()
		code, out, errs := runCLI(t, "wal", "check-store", "--data-dir", dir, "--etcd-endpoints", strings.Join(c.Endpoints(), ","),
			"--replica-id", "replica-a", "--json")
		if code != wantCode {
			t.Fatalf("check-store %s: exit %d, want %d\n%s%s", dir, code, wantCode, out, errs)
		}
		var rep etcdstore.CheckReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("check-store output %q: %v", out, err)
		}
		return rep
	}
	problems := func(rep etcdstore.CheckReport) []string {
		var ps []string
		for _, p := range rep.Problems {
			ps = append(ps, p.Problem)
		}
		return ps
	}
	rep := check(dirA, 0)
	if rep.Frames != 3 || rep.Copies != 3 || rep.Bindings != 1 || rep.Markers != 1 {
		t.Fatalf("clean report %+v: want 3 frames, 3 copies, 1 binding, 1 marker", rep)
	}
	if code, out, _ := runCLI(t, "wal", "check-store", "--data-dir", dirA, "--etcd-endpoints", c.Endpoints()[0], "--replica-id", "replica-a"); code != 0 || !strings.Contains(out, "ok: etcd and the WAL agree") {
		t.Fatalf("table output: exit %d\n%s", code, out)
	}

	// Under another prefix etcd holds nothing of the replica: every frame
	// is found wanting, and the table says what to look at.
	if code, out, _ := runCLI(t, "wal", "check-store", "--data-dir", dirA, "--etcd-endpoints", c.Endpoints()[0], "--replica-id", "replica-a",
		"--prefix", "/elsewhere/"); code != 1 || !strings.Contains(out, "etcd holds nothing of replica replica-a under /elsewhere/") {
		t.Fatalf("check-store under another prefix: exit %d\n%s", code, out)
	}
	if code, _, errs := runCLI(t, "wal", "check-store", "--data-dir", dirA, "--etcd-endpoints", c.Endpoints()[0], "--prefix", "/no-slash"); code == 0 || !strings.Contains(errs, "--prefix: must be") {
		t.Fatalf("check-store with a prefix not ending in /: exit %d\n%s", code, errs)
	}

	// Without --replica-id the log's frames name the replica; a name that
	// is not theirs is refused rather than checked against nothing.
	code, out, errs := runCLI(t, "wal", "check-store", "--data-dir", dirA, "--etcd-endpoints", c.Endpoints()[0], "--json")
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || rep.Replica != "replica-a" || rep.Frames != 3 {
		t.Fatalf("check-store without --replica-id: exit %d, %+v, %v\n%s%s; want replica-a's 3 frames checked", code, rep, err, out, errs)
	}
	if code, _, errs := runCLI(t, "wal", "check-store", "--data-dir", dirA, "--etcd-endpoints", c.Endpoints()[0], "--replica-id", "replica-b"); code == 0 || !strings.Contains(errs, `names replica "replica-a"`) {
		t.Fatalf("check-store under another replica's name: exit %d\n%s; want a refusal naming replica-a", code, errs)
	}

	// The WAL without the consume's two frames, as a kill during their
	// commit leaves it: their copies are pending (the replica takes them
	// up when it opens), the marker has no frames.
	rep = check(dirB, 1)
	if got := strings.Join(problems(rep), ","); got != "marker_without_frame" || rep.Pending != 2 {
		t.Fatalf("WAL lacking frames: problems %s, %d pending; want the marker without frames and the two copies pending (%+v)", got, rep.Pending, rep.Problems)
	}

	// The consume's answer lost here and its retry served by another
	// replica, which logged the consumed frame: the marker is on record.
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	copies, err := cli.Get(ctx, etcdstore.DefaultPrefix+"f/"+b.AuditID+"/replica-a/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var elsewhere string
	for _, kv := range copies.Kvs {
		if fs, err := wal.DecodeFrameList(kv.Value); err == nil && fs[0].Kind == wal.KindConsumed {
			elsewhere = strings.Replace(string(kv.Key), "/replica-a/", "/replica-b/", 1)
			if _, err := cli.Put(ctx, elsewhere, string(kv.Value)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if elsewhere == "" {
		t.Fatal("no copy of the consumed frame in etcd")
	}
	rep = check(dirB, 0)
	if len(rep.Problems) != 0 || rep.Pending != 2 {
		t.Fatalf("marker whose consume another replica logged: problems %+v, %d pending; want none and the two copies pending", rep.Problems, rep.Pending)
	}
	if _, err := cli.Delete(ctx, elsewhere); err != nil {
		t.Fatal(err)
	}

	rep = check(dirC, 1)
	if got := strings.Join(problems(rep), ","); got != "binding_without_frame,copy_without_frame,copy_without_frame,copy_without_frame,marker_without_frame" || rep.Pending != 0 {
		t.Fatalf("WAL lacking older frames: problems %s, %d pending; want every record without its frame (%+v)", got, rep.Pending, rep.Problems)
	}

	// A deleted binding.
	if _, err := cli.Delete(ctx, etcdstore.DefaultPrefix+"b/"+b.PreflightID); err != nil {
		t.Fatal(err)
	}
	rep = check(dirA, 1)
	if len(rep.Problems) != 1 || rep.Problems[0].Problem != etcdstore.ProblemFrameWithoutBinding || rep.Problems[0].PreflightID != b.PreflightID {
		t.Fatalf("deleted binding: problems %+v, want the preflight frame without its binding", rep.Problems)
	}
	if code, out, _ := runCLI(t, "wal", "check-store", "--data-dir", dirA, "--etcd-endpoints", c.Endpoints()[0], "--replica-id", "replica-a"); code != 1 || !strings.Contains(out, "MISMATCH: 1 problems") || !strings.Contains(out, "frame_without_binding") {
		t.Fatalf("table output of a mismatch: exit %d\n%s", code, out)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
