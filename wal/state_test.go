package wal_test

import (
	"testing"

	"github.com/contractrefine/autonomy/internal/state"
	"github.com/contractrefine/autonomy/internal/state/statetest"
	"github.com/contractrefine/autonomy/wal"
)

// TestStateConformance runs the state seam's suite against the bbolt log.
func TestStateConformance(t *testing.T) {
	statetest.Run(t, func(t *testing.T) (state.Store, func() state.Store) {
		dir := t.TempDir()
		db, err := wal.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		restart := func() state.Store {
			if err := db.Close(); err != nil {
				t.Fatalf("close before restart: %v", err)
			}
			if db, err = wal.Open(dir, nil); err != nil {
				t.Fatalf("reopen: %v", err)
			}
			return db
		}
		return db, restart
	})
}
