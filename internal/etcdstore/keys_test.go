package etcdstore

import (
	"fmt"
	"math"
	"testing"
)

// The frame and copy index keys are built by hand; they must be what
// doc.go's %016x layout says.
func TestSeqKeysLayout(t *testing.T) {
	p := keys("/pfx/")
	for _, seq := range []uint64{0, 1, 0xabc, 1 << 40, math.MaxUint64} {
		if got, want := p.frame("au_1", "replica-a", seq), fmt.Sprintf("/pfx/f/au_1/replica-a/%016x", seq); got != want {
			t.Errorf("frame key %q, want %q", got, want)
		}
		if got, want := p.copyIndex("replica-a", seq), fmt.Sprintf("/pfx/r/replica-a/%016x", seq); got != want {
			t.Errorf("copy index key %q, want %q", got, want)
		}
	}
}
