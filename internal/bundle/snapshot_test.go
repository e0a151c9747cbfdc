package bundle

import (
	"errors"
	"io/fs"
	"sync"
	"testing"
	"testing/fstest"
)

// swappingFS is a bundle replaced while it is read: each open of
// data.json is served from the version in place, which is then swapped for
// the other one (every time with alternate, once without), so whatever is
// opened next comes from the new version.
type swappingFS struct {
	versions  [2]fstest.MapFS
	alternate bool
	mu        sync.Mutex
	cur       int
	reads     int
}

func (f *swappingFS) Open(name string) (fs.File, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.cur
	if name == "data.json" {
		f.reads++
		if f.alternate || f.reads == 1 {
			f.cur = 1 - f.cur
		}
	}
	return f.versions[v].Open(name)
}

// Stat does not count as a read.
func (f *swappingFS) Stat(name string) (fs.FileInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.versions[f.cur].Stat(name)
}

func bundleVersion(allow, data string) fstest.MapFS {
	return fstest.MapFS{
		"policy.rego": {Data: []byte("package autonomy\nallow if input.action.kind in data.lists." + allow + "\n")},
		"data.json":   {Data: []byte(data)},
	}
}

// TestSnapshotNeverMixesVersions: a bundle swapped between reading its
// data and its policy (data.json sorts first) is read again until two
// reads agree, and what loads is one version whole, never the first
// read's mix.
func TestSnapshotNeverMixesVersions(t *testing.T) {
	v1 := bundleVersion("a", `{"lists":{"a":["tool.echo"],"b":["tool.danger"]}}`)
	v2 := bundleVersion("b", `{"lists":{"a":["tool.danger"],"b":["tool.echo"]}}`)
	fsys := &swappingFS{versions: [2]fstest.MapFS{v1, v2}}
	got, err := snapshot(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if !sameFiles(got, v2) {
		t.Fatalf("snapshot = %v, want version 2 whole", got)
	}
	if fsys.reads != 3 {
		t.Errorf("%d reads, want 3 (a mixed one, then two that agree)", fsys.reads)
	}

	// A bundle that changes during every read is refused: the one in force
	// stays.
	if _, err := snapshot(&swappingFS{versions: [2]fstest.MapFS{v1, v2}, alternate: true}); !errors.Is(err, errUnsettled) {
		t.Fatalf("snapshot of a bundle that never settles: %v, want errUnsettled", err)
	}
}
