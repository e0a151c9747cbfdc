package wal

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Writing ahead of the log's end. bbolt grows its file with ftruncate, so
// the pages past its high-water mark are a hole: the first write to each
// page allocates its block, and the fdatasync of that commit then also
// writes the file system's allocation metadata (with a journal, a second
// device flush). A log only ever appends, so nearly every commit wrote a
// new page and paid for that. Commits instead keep the pages past
// the high-water mark written with zeros, aheadChunk at a time with one
// sync, so bbolt's commits overwrite blocks that already exist. The zeros
// are in pages bbolt has not allocated: it reads no page past its
// high-water mark, and a crash leaves a longer file, not a different log.
//
// Space written ahead must not let the log go on writing on a full disk:
// a commit fails while the file system has less than MinFreeBytes free
// (what Probe reports), and when a refill fails, so a full disk fails every
// commit until space is freed, as it did without the zeros.
const (
	// aheadLow is how far past the high-water mark the zeros must reach
	// before a commit; below it the commit writes up to aheadChunk past it.
	aheadLow = 512 << 10
	// aheadChunk is how far past the high-water mark a refill writes.
	aheadChunk = 2 << 20
)

// ahead is the state for writing ahead; only the one committing (wal.go:
// leading) uses it.
type ahead struct {
	f        *os.File // the log file opened again for writing, nil when off
	dir      string   // the directory whose file system is checked
	zeroedTo int64    // how far the file holds written zeros or pages
	zeros    []byte
}

// openAhead opens the log file a second time for the zeros. Without it
// (an error) commits fill holes, as bbolt alone does.
func openAhead(path string) *ahead {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil
	}
	return &ahead{f: f, dir: filepath.Dir(path)}
}

// before runs inside a commit's write transaction before bbolt writes
// any of its pages, hwm being the file's high-water mark in bytes at the
// transaction's start. An error fails the commit.
func (a *ahead) before(hwm int64) error {
	if a == nil {
		return nil
	}
	if free, ok := freeBytes(a.dir); ok && free < MinFreeBytes {
		return fmt.Errorf("%w: %d bytes free for %s: %w", ErrDiskFull, free, a.dir, syscall.ENOSPC)
	}
	if a.zeroedTo >= hwm+aheadLow {
		return nil
	}
	if a.zeros == nil {
		a.zeros = make([]byte, 256<<10)
	}
	from, to := max(a.zeroedTo, hwm), hwm+aheadChunk
	for off := from; off < to; off += int64(len(a.zeros)) {
		if _, err := a.f.WriteAt(a.zeros[:min(int64(len(a.zeros)), to-off)], off); err != nil {
			return fmt.Errorf("write ahead of the log's end: %w", err)
		}
	}
	if err := a.f.Sync(); err != nil {
		return fmt.Errorf("write ahead of the log's end: %w", err)
	}
	a.zeroedTo = to
	return nil
}

func (a *ahead) close() {
	if a != nil {
		a.f.Close()
	}
}
