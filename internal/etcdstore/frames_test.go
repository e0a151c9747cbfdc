package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/wal"
)

// TestLargeCopiesSplitTransactions: concurrent frames whose copies
// together pass etcd's request limit (--max-request-bytes, 1.5 MiB by
// default) go in several transactions, so none is refused.
func TestLargeCopiesSplitTransactions(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	ctx := context.Background()
	const calls = 48
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			// Random hex packs to about half: some 64 KB a copy.
			raw := make([]byte, 64<<10)
			rand.Read(raw)
			_, err := s.AppendDecision(ctx, wal.FrameInput{Kind: wal.KindDecision, AuditID: fmt.Sprintf("au_large_%02d", i),
				Time: time.Now(), Attrs: map[string]any{"outcome": "deny", "args": hex.EncodeToString(raw)}})
			errs <- err
		}()
	}
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestCopyRunsBounded: a copy holds the consecutive frames of one audit
// id, at most maxRun of them, so a frame's copy is never further than
// maxRun-1 keys before its own seq's.
func TestCopyRunsBounded(t *testing.T) {
	var got [][2]int
	for i, j := range copyRuns(framesOf(2*maxRun+3, 1, 2)) {
		got = append(got, [2]int{i, j})
	}
	want := [][2]int{{0, maxRun}, {maxRun, 2 * maxRun}, {2 * maxRun, 2*maxRun + 3}, {2*maxRun + 3, 2*maxRun + 4}, {2*maxRun + 4, 2*maxRun + 6}}
	if !slices.Equal(got, want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
	if n := copyPuts(framesOf(2*maxRun+3, 1, 2)); n != len(want) {
		t.Fatalf("copyPuts %d, want %d", n, len(want))
	}
}
