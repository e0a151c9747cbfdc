package wal

import (
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Resident pages. bbolt reads the file through a shared, read-only memory
// map. A page a read touches stays mapped in the process, and with it up
// to 15 cached neighbours the kernel maps on the same fault (fault-around,
// 64 KB; bbolt's MADV_RANDOM stops readahead, not that), until the mapping
// is released. The open-time verification reads every page, a binding
// read on a cache miss reads its frame wherever it lies, and each commit
// reads the pages it copies: left alone, the whole file ends up counted in
// the process's VmRSS, which is what operators' dashboards show, although
// these are page-cache pages the kernel drops under memory pressure.
//
// So the DB releases the mapping's pages (madvise MADV_DONTNEED; Linux
// only, resident_linux.go): every verifyRelease frames of a verification,
// once the open-time verification ends, and then once at most every
// releaseInterval while the log is read or written. Nothing is lost: the
// mapping is read-only and shared, the pages stay in the page cache, and
// the next read of one maps it again (a minor fault, no disk read). A
// release runs in a read transaction, so bbolt cannot remap the file
// meanwhile, and covers the pages below that transaction's high-water
// mark, all inside the mapping.

// releaseInterval is the longest a page read or written stays mapped while
// the log is in use: the RSS the mapping adds is what that long a stretch
// of traffic touches.
const releaseInterval = 100 * time.Millisecond

// verifyRelease is how many frames a verification reads between releases.
const verifyRelease = 16384

// pages schedules the releases. armed is set from the first read or write
// after a release until the next one; the read or write that sets it wakes
// the releasing goroutine.
type pages struct {
	armed atomic.Bool
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

func newPages() *pages {
	return &pages{kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// touched notes a read or write through the mapping. Once armed it costs
// one atomic load.
func (p *pages) touched() {
	if p.armed.Load() || !p.armed.CompareAndSwap(false, true) {
		return
	}
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// releaseLoop releases the mapping's pages releaseInterval after the first
// read or write since the last release, until closePages.
func (db *DB) releaseLoop() {
	p := db.pages
	defer close(p.done)
	t := time.NewTimer(releaseInterval)
	t.Stop()
	for {
		select {
		case <-p.kick:
		case <-p.stop:
			return
		}
		t.Reset(releaseInterval)
		select {
		case <-t.C:
		case <-p.stop:
			return
		}
		// Disarmed first: a read during the release arms the next one.
		p.armed.Store(false)
		db.releasePages()
	}
}

// closePages stops the releasing goroutine and waits for it.
func (db *DB) closePages() {
	close(db.pages.stop)
	<-db.pages.done
}

// releasePages releases the mapping's resident pages. A failure only
// leaves the pages mapped; it is logged and changes nothing else.
func (db *DB) releasePages() {
	if db.poisoned.Load() {
		return // the file is damaged: its pages are left as they are
	}
	err := db.guarded("releasing pages", func() error {
		return db.bolt.View(func(btx *bolt.Tx) error { return db.releaseIn(btx) })
	})
	if err != nil {
		db.log.Warn("wal: releasing the mapping's pages failed", "err", err)
	}
}

// releaseIn releases the mapping's pages below btx's high-water mark;
// btx, open, keeps bbolt from remapping the file meanwhile.
func (db *DB) releaseIn(btx *bolt.Tx) error {
	return releaseMapped(db.bolt.Info().Data, btx.Size())
}

// advise tells the kernel the mapping below btx's high-water mark is about
// to be read in order (sequential) or at random, as bbolt advises. Advice
// that fails changes nothing but the speed of the reads.
func (db *DB) advise(btx *bolt.Tx, sequential bool) {
	_ = adviseMapped(db.bolt.Info().Data, btx.Size(), sequential)
}
