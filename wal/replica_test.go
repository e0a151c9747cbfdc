package wal

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/canon"
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

// TestNamingReplicaAsMap holds namingReplica to the bytes the attrs got
// when they were decoded into a map, the replica added unless named, and
// written with canon.Marshal.
func TestNamingReplicaAsMap(t *testing.T) {
	asMap := func(canonical []byte, name string) ([]byte, error) {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(canonical, &m); err != nil {
			return nil, err
		}
		if _, ok := m[AttrReplica]; ok {
			return canonical, nil
		}
		m[AttrReplica], _ = json.Marshal(name)
		return canon.Marshal(m)
	}
	typed, err := EncodeAttrs(&DecisionAttrs{Outcome: "allow", Reason: "r", RequestID: "q", Method: "POST", Path: "/a<b>"})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{
		string(typed),
		`{}`,
		`{"a":1}`,
		`{"replica":"other"}`,
		`{"a":1,"replica":"other","z":2}`,
		`{"reason":"x","request_id":"y"}`,
		`{"q":"\u00e9","r":{"replica":"nested"},"s":[1,2.5,"<"]}`,
		`{"replic":1,"replicaa":2,"Replica":3}`,
		`{"\ud83d\ude00":1,"\uffff":2}`,
		`{"a": 1, "b" : [ ] }`,
		`[]`,
		`"x"`,
		`{"a":}`,
	} {
		for _, name := range []string{"replica-a", `we"ird<&>`} {
			want, werr := asMap([]byte(in), name)
			got, gerr := namingReplica([]byte(in), name)
			if (werr != nil) != (gerr != nil) || string(got) != string(want) {
				t.Errorf("%s, %q: got %s, %v; want %s, %v", in, name, got, gerr, want, werr)
			}
		}
	}
}
