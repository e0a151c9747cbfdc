package wal

import "os"

// Writing ahead of the log's end. bbolt grows its file with ftruncate, so
// the pages past its high-water mark are a hole: the first write to each
// page allocates its block, and the fdatasync of that commit then also
// waits for the file system's journal to record the allocation (on ext4 a
// second device flush). A log only ever appends, so nearly every commit
// writes a new page and paid for that. The commit loop instead writes zeros
// to the pages past the high-water mark ahead of need, aheadChunk at a time
// with one sync, so bbolt's commits overwrite blocks that already exist.
// The zeros are in pages bbolt has not allocated: it reads no page past
// its high-water mark, and a crash leaves a longer file, not a different
// log. It is best effort: an error (a full disk) leaves the pages holes,
// as before, and the commit goes on.
const (
	// aheadLow is how far past the high-water mark the zeros must reach
	// before a commit; below it the loop writes aheadChunk more.
	aheadLow = 1 << 20
	// aheadChunk is how much one refill writes.
	aheadChunk = 4 << 20
)

// zeroAhead makes sure the aheadLow bytes past hwm, the high-water mark of
// the file in bytes at the start of a write transaction, are written zeros.
// It runs inside the commit loop's transaction before bbolt writes any of
// its pages, so nothing else writes the file meanwhile.
func (db *DB) zeroAhead(hwm int64) {
	if db.ahead == nil || db.zeroedTo >= hwm+aheadLow {
		return
	}
	from, to := max(db.zeroedTo, hwm), hwm+aheadChunk
	zeros := make([]byte, 256<<10)
	for off := from; off < to; off += int64(len(zeros)) {
		if _, err := db.ahead.WriteAt(zeros[:min(int64(len(zeros)), to-off)], off); err != nil {
			db.stopAhead(err)
			return
		}
	}
	if err := db.ahead.Sync(); err != nil {
		db.stopAhead(err)
		return
	}
	db.zeroedTo = to
}

// stopAhead gives up writing ahead after err.
func (db *DB) stopAhead(err error) {
	db.log.Warn("wal: cannot write ahead of the log's end; commits may be slower", "err", err)
	db.ahead.Close()
	db.ahead = nil
}

// openAhead opens the log file a second time for zeroAhead's writes.
func openAhead(path string) *os.File {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil
	}
	return f
}
