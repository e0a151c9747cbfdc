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

// vanishingFS lists a file in its first directory listing that is gone by
// the time it is opened (an old ConfigMap link removed after the swap),
// then lists only what is there.
type vanishingFS struct {
	fstest.MapFS
	listed bool
}

func (f *vanishingFS) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, err := f.MapFS.ReadDir(name)
	if name == "." && !f.listed {
		f.listed = true
		gone := fstest.MapFS{"gone.rego": {Data: []byte("package gone\n")}}
		more, _ := gone.ReadDir(".")
		entries = append(entries, more...)
	}
	return entries, err
}

// TestSnapshotReadsAgainWhenAFileVanishes: a file gone between the listing
// and its read is a change, not a failed reload; a file that stays missing
// is still an error naming it.
func TestSnapshotReadsAgainWhenAFileVanishes(t *testing.T) {
	v := bundleVersion("a", `{"lists":{"a":["tool.echo"]}}`)
	got, err := snapshot(&vanishingFS{MapFS: v})
	if err != nil {
		t.Fatalf("snapshot with a file gone after the listing: %v", err)
	}
	if !sameFiles(got, v) {
		t.Fatalf("snapshot = %v, want what is there", got)
	}
	dangling := fstest.MapFS{"policy.rego": v["policy.rego"], "link.rego": {Mode: fs.ModeSymlink}}
	if _, err := snapshot(dangling); err == nil {
		t.Fatal("snapshot of a bundle with a file that cannot be read succeeded")
	}
}
