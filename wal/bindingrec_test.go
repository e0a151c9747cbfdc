package wal

import (
	"context"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/preflight"
)

// frameBinding is the binding and the decision JSON as the frame states
// them: what Binding read before the compact record, the reference the
// record must reproduce.
func frameBinding(t *testing.T, db *DB, id string) (preflight.Binding, []byte) {
	t.Helper()
	var b preflight.Binding
	var decision []byte
	err := db.View(func(tx *Tx) error {
		seq, ok := indexSeq(tx.btx.Bucket(bucketPreflights).Get([]byte(id)))
		if !ok {
			return ErrNotFound
		}
		a, f, err := tx.preflightFrame(seq)
		b = preflight.Binding{PreflightID: a.PreflightID, AuditID: f.AuditID, Outcome: a.Outcome,
			ActorID: a.ActorID, Tenant: a.Tenant, ExpiresAt: a.ExpiresAt, Steps: a.Steps}
		decision = a.Decision
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b, decision
}

// setIndex replaces the preflights value of id.
func setIndex(t *testing.T, db *DB, id string, v []byte) {
	t.Helper()
	err := db.Update(context.Background(), func(tx *Tx) error {
		return tx.btx.Bucket(bucketPreflights).Put([]byte(id), v)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBindingRecordMatchesFrame: the compact record gives back exactly the
// binding the frame states, for every kind of field value, without the
// decision, which Decision returns byte for byte.
func TestBindingRecordMatchesFrame(t *testing.T) {
	hexDigest := "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	cases := map[string]func(b *preflight.Binding){
		"one step, raw digest": func(b *preflight.Binding) {
			b.Steps = []preflight.BoundStep{{ID: "s1", Kind: "tool.echo", ArgsDigest: hexDigest}}
		},
		"tenant and three steps": func(b *preflight.Binding) {
			b.Tenant = "acme"
			b.Steps = []preflight.BoundStep{{ID: "a", Kind: "k1", ArgsDigest: hexDigest},
				{ID: "b", Kind: "k2", ArgsDigest: "sha256:short"}, {ID: "c", Kind: "k3", ArgsDigest: ""}}
		},
		"upper-case hex kept as text": func(b *preflight.Binding) {
			b.Steps = []preflight.BoundStep{{ID: "s1", Kind: "tool.echo",
				ArgsDigest: "sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"}}
		},
		"no steps, failed outcome": func(b *preflight.Binding) {
			b.Outcome = preflight.OutcomeDeny
			b.Steps = []preflight.BoundStep{}
		},
		"nanoseconds and a zone": func(b *preflight.Binding) {
			b.ExpiresAt = time.Date(2026, 6, 23, 16, 29, 0, 123456789, time.FixedZone("X", 2*3600))
		},
		"before 1970": func(b *preflight.Binding) {
			b.ExpiresAt = time.Date(1960, 1, 2, 3, 4, 5, 6, time.UTC)
		},
		"approvals on some steps": func(b *preflight.Binding) {
			until := time.Date(2026, 6, 23, 14, 44, 0, 5, time.UTC)
			b.Steps = []preflight.BoundStep{{ID: "a", Kind: "k1", ArgsDigest: hexDigest},
				{ID: "b", Kind: "k2", ArgsDigest: hexDigest,
					Approval: &preflight.StepApproval{Authorities: []string{"role:x", "role:y"}, ExpiresAt: until}},
				{ID: "c", Kind: "k3", ArgsDigest: "",
					Approval: &preflight.StepApproval{Authorities: []string{"role:z"}, ExpiresAt: until}}}
		},
		"non-ASCII strings": func(b *preflight.Binding) {
			b.ActorID, b.Tenant = "user:zoë", "tenant\u2028x"
		},
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			db := openTest(t, nil)
			ctx := context.Background()
			b := testBinding("pf_"+name, "tool.echo")
			edit(&b)
			record(t, db, b)
			want, wantDecision := frameBinding(t, db, b.PreflightID)
			got, err := db.Binding(ctx, b.PreflightID)
			if err != nil {
				t.Fatal(err)
			}
			d, err := db.Decision(ctx, b.PreflightID)
			if err != nil || string(d) != string(wantDecision) || len(d) == 0 {
				t.Fatalf("decision %s, %v; frame has %s", d, err, wantDecision)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("record  %#v\nframe   %#v", got, want)
			}
			// What the gate caches at record time is what it would read.
			if c, err := CompactBinding(&b); err != nil || !reflect.DeepEqual(c, got) {
				t.Fatalf("compact %#v, %v\nread    %#v", c, err, got)
			}
			// What it keeps packed reads back as the same, in a call's
			// one-step buffer or not.
			p := PackBinding(&b)
			var one [1]preflight.BoundStep
			for _, steps := range [][]preflight.BoundStep{nil, one[:0]} {
				var u preflight.Binding
				if err := UnpackBinding(p, &u, steps); err != nil || !reflect.DeepEqual(u, got) || PackedID(p) != b.PreflightID {
					t.Fatalf("unpacked %#v, %v\nread     %#v", u, err, got)
				}
			}
		})
	}
}

// TestBindingRecordSmall: a one-step binding's record stays small; it is
// paid on disk by every preflight (the 2 KB goal of docs/PERFORMANCE.md).
func TestBindingRecordSmall(t *testing.T) {
	b := testBinding("pf_0123456789abcdef0123", "tool.echo")
	b.AuditID = "au_0123456789abcdef0123"
	b.Steps[0].ArgsDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	v := encodeBindingRecord(7, &b)
	if len(v) > 128 {
		t.Fatalf("record of %d bytes", len(v))
	}
	if seq, ok := indexSeq(v); !ok || seq != 7 {
		t.Fatalf("seq %d %v", seq, ok)
	}
}

// TestBindingIndexValueWithoutRecord: a preflights value of the seq alone
// (no binary ever wrote one) is a corrupt record, for Binding and for
// Verify, never a binding read some other way.
func TestBindingIndexValueWithoutRecord(t *testing.T) {
	db := openTest(t, nil)
	ctx := context.Background()
	b := testBinding("pf_old", "tool.echo", "tool.sleep")
	f := record(t, db, b)
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], f.Seq)
	setIndex(t, db, b.PreflightID, seq[:])
	if got, err := db.Binding(ctx, b.PreflightID); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("binding %+v, %v; want ErrCorrupt", got, err)
	}
	if rep, err := db.Verify(ctx); err != nil || rep.OK() || rep.BadSeq != f.Seq {
		t.Fatalf("verify %+v, %v; want the frame's seq named", rep, err)
	}
}

// TestBindingRecordCorrupt: a damaged record is ErrCorrupt, never a binding
// with missing fields; an index value too short for a seq is not found.
func TestBindingRecordCorrupt(t *testing.T) {
	b := testBinding("pf_bad", "tool.echo")
	good := encodeBindingRecord(1, &b)
	cases := map[string]struct {
		v    []byte
		want error
	}{
		"truncated":       {good[:len(good)-3], ErrCorrupt},
		"trailing byte":   {append(append([]byte{}, good...), 0), ErrCorrupt},
		"unknown version": {append(append([]byte{}, good[:8]...), append([]byte{9}, good[9:]...)...), ErrCorrupt},
		"huge step count": {append(append([]byte{}, good[:len(good)-len(encodeSteps(&b))]...), 0xff, 0xff, 0x03), ErrCorrupt},
		"short":           {good[:5], ErrNotFound},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			db := openTest(t, nil)
			record(t, db, b)
			setIndex(t, db, b.PreflightID, tc.v)
			if _, err := db.Binding(context.Background(), b.PreflightID); !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// encodeSteps is the tail of b's record from the step count on.
func encodeSteps(b *preflight.Binding) []byte {
	full := encodeBindingRecord(1, b)
	noSteps := *b
	noSteps.Steps = nil
	head := encodeBindingRecord(1, &noSteps)
	return full[len(head)-1:]
}

// FuzzDecodeBindingRecord: no input makes the decoder panic, and whatever
// it accepts encodes to a record that decodes to the same binding.
func FuzzDecodeBindingRecord(f *testing.F) {
	b := testBinding("pf_fuzz", "tool.echo", "tool.sleep")
	b.Tenant = "t"
	f.Add(encodeBindingRecord(1, &b)[8:])
	f.Fuzz(func(t *testing.T, v []byte) {
		got, err := decodeBindingRecord("pf_fuzz", v)
		if err != nil {
			return
		}
		again, err := decodeBindingRecord("pf_fuzz", encodeBindingRecord(0, &got)[8:])
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("%x decodes to %+v, which reads back as %+v, %v", v, got, again, err)
		}
	})
}
