package wal

import (
	"context"
	"encoding/json"
	"os"
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

// TestNamingReplicaAsMap holds namingReplica, and the splice of canonical
// attrs (namingInCanonical), to the bytes the attrs got when they were
// decoded into a map, the replica added unless named, and written with
// canon.Marshal.
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
		`{"":1}`,
		`{"":1,"z":2}`,
		`{"":1,"a":2,"replica":3}`,
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
			// The splice takes canonical attrs; text that is not JSON goes
			// to namingReplica as it is.
			c := []byte(in)
			var v any
			if json.Unmarshal(c, &v) == nil {
				c, _ = canon.Marshal(v)
			}
			if got, gerr := namingInCanonical(c, replicaOf(t, name)); (werr != nil) != (gerr != nil) || string(got) != string(want) {
				t.Errorf("splice %s, %q: got %s, %v; want %s, %v", c, name, got, gerr, want, werr)
			}
		}
	}
	// Names out of order, or not ASCII, go to namingReplica too.
	for _, in := range []string{`{"b":1,"a":2}`, `{"a":1,"a":2}`, `{"é":1}`, `{"a":1`, `{"s":1`,
		`{"s":1,"replica":2}`, `{"a":1}garbage`, `{"a":1}{}`} {
		want, werr := namingReplica([]byte(in), "r")
		if got, gerr := namingInCanonical([]byte(in), replicaOf(t, "r")); (werr != nil) != (gerr != nil) || string(got) != string(want) {
			t.Errorf("splice %s: got %s, %v; want %s, %v", in, got, gerr, want, werr)
		}
	}
}

// FuzzNamingInCanonical: on any object put in canonical form, the splice
// writes what namingReplica writes.
func FuzzNamingInCanonical(f *testing.F) {
	for _, s := range []string{`{}`, `{"":1}`, `{"a":1,"z":[true,null]}`, `{"replica":1}`, `{"s":"\u2028","t":{"u":-0.5}}`} {
		f.Add([]byte(s), "r1")
	}
	f.Fuzz(func(t *testing.T, in []byte, name string) {
		var m map[string]any
		if json.Unmarshal(in, &m) != nil {
			return
		}
		c, err := canon.Marshal(m)
		if err != nil {
			return
		}
		want, werr := namingReplica(c, name)
		got, gerr := namingInCanonical(c, replicaOf(t, name))
		if (werr != nil) != (gerr != nil) || string(got) != string(want) {
			t.Fatalf("%s, %q: got %s, %v; want %s, %v", c, name, got, gerr, want, werr)
		}
	})
}

// TestTypedAttrsNamedInPlace: the typed writers name the replica as
// namingReplica names it in their canonical JSON, an approval that names
// its own replica included.
func TestTypedAttrsNamedInPlace(t *testing.T) {
	raw, err := os.ReadFile("../internal/httpapi/testdata/golden/echo_no_session.json")
	if err != nil {
		t.Fatal(err)
	}
	pre := PreflightRecord{Binding: testBinding("pf_named", "tool.echo"), Decision: raw, Time: t0,
		Submit: &SubmitAttrs{Attempt: 1, RequestDigest: "sha256:x", Reason: "r"}}
	for _, a := range []typedAttrs{
		pre.attrs(),
		&DecisionAttrs{Outcome: "allow", Reason: "r", RequestID: "q", Method: "POST", Path: "/a<b>"},
		&ConsumedAttrs{},
		&ApprovalAttrs{Approver: "alice", Decision: DecisionApprove},
		&ApprovalAttrs{Approver: "alice", Decision: DecisionApprove, Replica: "b"},
	} {
		plain, err := EncodeAttrs(a)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"replica-a", `we"ird<&>`, "\xff"} {
			want, err := namingReplica(plain, name)
			if err != nil {
				t.Fatal(err)
			}
			got, err := encodeNamed(a, replicaOf(t, name))
			if err != nil {
				t.Fatal(err)
			}
			if string(got.canonical) != string(want) {
				t.Errorf("%T, %q:\n got %s\nwant %s", a, name, got.canonical, want)
			}
		}
	}
}

// replicaOf is name as a log opened with Options.Replica name holds it.
func replicaOf(t testing.TB, name string) replicaName {
	t.Helper()
	r, err := newReplicaName(name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
