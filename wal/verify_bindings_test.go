package wal

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/preflight"
)

// TestVerifyCatchesEditedBindingRecord: the compact binding record is what
// the gate reads, so Verify compares it with the hash-chained frame; a later
// expiry, another kind or another actor written into the record is named.
func TestVerifyCatchesEditedBindingRecord(t *testing.T) {
	tests := map[string]func(b *preflight.Binding){
		"later expiry":  func(b *preflight.Binding) { b.ExpiresAt = b.ExpiresAt.Add(time.Hour) },
		"another kind":  func(b *preflight.Binding) { b.Steps[0].Kind = "tool.echo" },
		"another actor": func(b *preflight.Binding) { b.ActorID = "user:mallory" },
	}
	for name, edit := range tests {
		t.Run(name, func(t *testing.T) {
			db := openTest(t, nil)
			ctx := context.Background()
			b := testBinding("pf_verifyrecord0001", "tool.shell")
			f := record(t, db, b)
			if rep, err := db.Verify(ctx); err != nil || !rep.OK() {
				t.Fatalf("clean log: %+v %v", rep, err)
			}
			edited := b
			edited.Steps = slices.Clone(b.Steps)
			edit(&edited)
			err := db.Update(ctx, func(tx *Tx) error {
				return tx.btx.Bucket(bucketPreflights).Put([]byte(b.PreflightID), encodeBindingRecord(f.Seq, &edited))
			})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := db.Verify(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The frames held: the record is what disagrees with them.
			if rep.OK() || rep.BadSeq != f.Seq || !rep.ChainHeld {
				t.Fatalf("verify after editing the record = %+v, want bad seq %d, the chain held", rep, f.Seq)
			}
		})
	}
}
