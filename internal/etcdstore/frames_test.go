package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
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
