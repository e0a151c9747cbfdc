package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/internal/boltfile"
)

// pagesLog writes a closed log of a few preflights in a fresh directory
// and returns the directory and the log file's path.
func pagesLog(t *testing.T) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		record(t, db, testBinding(fmt.Sprintf("pf_pages_%d", i), "tool.echo"))
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, filepath.Join(dir, FileName)
}

// checkPages opens dir read-only for CheckPages and runs the chain's walk
// and the pages' check.
func checkPages(t *testing.T, dir string) (VerifyReport, PageReport) {
	t.Helper()
	db, err := Open(dir, &Options{ReadOnly: true, CheckPages: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep, err := db.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pages, err := db.CheckPages()
	if err != nil {
		t.Fatal(err)
	}
	return rep, pages
}

// TestCheckPagesFindsAPageInUseListedFree: a page in use that the
// freelist also lists is damage the chain's walk cannot see (every frame
// reads and hashes right, and a writable open takes the file), and which a
// later commit would make real by writing over the page. CheckPages
// names it; an intact log has no problem.
func TestCheckPagesFindsAPageInUseListedFree(t *testing.T) {
	dir, path := pagesLog(t)
	if rep, pages := checkPages(t, dir); !rep.OK() || !pages.OK() {
		t.Fatalf("intact log: %+v, %+v", rep, pages)
	}
	m, err := boltfile.ReadMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := boltfile.ListFree(path, m.Root); err != nil {
		t.Fatal(err)
	}
	rep, pages := checkPages(t, dir)
	if !rep.OK() || rep.Frames != 5 {
		t.Fatalf("the chain's walk: %+v; want it to hold", rep)
	}
	want := fmt.Sprintf("page %d:", m.Root)
	if pages.OK() || !strings.Contains(strings.Join(pages.Problems, "\n"), want) {
		t.Fatalf("pages: %+v; want a problem naming %q", pages, want)
	}
}

// TestDamagedFreelistFailsTheCheckedOpen: a writable open reads the
// freelist and refuses a damaged one; a read-only open for CheckPages does
// too (so `wal verify` never passes a log serve refuses), while a plain
// read-only open, for export and audit, still reads the frames.
func TestDamagedFreelistFailsTheCheckedOpen(t *testing.T) {
	dir, path := pagesLog(t)
	m, err := boltfile.ReadMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := boltfile.Overwrite(path, m.Freelist, 0xff); err != nil {
		t.Fatal(err)
	}
	damaged, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Each open gets a copy: a failed open leaves bbolt's half-open
	// handle, and its lock, alone (open.go).
	for _, o := range []*Options{{ReadOnly: true, CheckPages: true}, nil} {
		copyDir := t.TempDir()
		if err := os.WriteFile(filepath.Join(copyDir, FileName), damaged, 0o600); err != nil {
			t.Fatal(err)
		}
		if db, err := Open(copyDir, o); !errors.Is(err, ErrCorrupt) {
			if err == nil {
				db.Close()
			}
			t.Fatalf("open %+v: %v; want ErrCorrupt", o, err)
		}
	}
	db, err := Open(dir, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if rep, err := db.Verify(context.Background()); err != nil || !rep.OK() || rep.Frames != 5 {
		t.Fatalf("frames read-only: %+v, %v", rep, err)
	}
	if _, err := db.CheckPages(); err == nil {
		t.Fatal("CheckPages ran on a log opened read-only without Options.CheckPages")
	}
}

// TestCheckPagesOnACutFile: a file cut short of its last page in use is
// reported by CheckPages before bbolt's check reads past its end.
func TestCheckPagesOnACutFile(t *testing.T) {
	dir, path := pagesLog(t)
	m, err := boltfile.ReadMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.Freelist+1 >= m.HighWater {
		t.Skipf("the freelist is the last page (%d of %d); nothing to cut before it", m.Freelist, m.HighWater)
	}
	if err := os.Truncate(path, int64(m.HighWater-1)*m.PageSize); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, &Options{ReadOnly: true, CheckPages: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pages, err := db.CheckPages()
	if err != nil || pages.OK() || !strings.Contains(pages.Problems[0], "the file ends at byte") {
		t.Fatalf("pages of a cut file: %+v, %v", pages, err)
	}
}

// BenchmarkCheckPages is CheckPages on a log of VERIFY_FRAMES frames
// (default 99,000) in the service's proportions, per frame, as
// BenchmarkVerify is the chain's walk (docs/PERFORMANCE.md).
func BenchmarkCheckPages(b *testing.B) {
	frames := verifyFrames()
	dir := b.TempDir()
	fillServed(b, dir, frames/3)
	db, err := Open(dir, &Options{ReadOnly: true, CheckPages: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	b.ReportAllocs()
	for b.Loop() {
		if rep, err := db.CheckPages(); err != nil || !rep.OK() {
			b.Fatalf("check: %+v, %v", rep, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/(float64(b.N)*float64(frames/3*3)), "ns/frame")
}
