package wal

import (
	"context"
	"testing"
	"time"
)

func TestFramesNameTheirReplica(t *testing.T) {
	db, err := Open(t.TempDir(), &Options{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	for name, attrs := range map[string]any{
		"map":      map[string]any{"outcome": "allow", "z": 1},
		"typed":    &DecisionAttrs{Outcome: "deny"},
		"own name": map[string]any{"replica": "replica-b"},
	} {
		f, err := db.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: "au_replica_" + name, Time: time.Now(), Attrs: attrs})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		if ok, err := f.Attr(AttrReplica, &got); !ok || err != nil {
			t.Fatalf("%s: no replica attr in %s: %v", name, f.Attrs, err)
		}
		want := "replica-a"
		if name == "own name" {
			want = "replica-b"
		}
		if got != want {
			t.Errorf("%s: replica %q, want %q", name, got, want)
		}
	}
	rep, err := db.Verify(ctx)
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}
