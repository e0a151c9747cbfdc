package wal

import (
	"fmt"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// openBolt opens the bbolt file. bbolt panics on some damaged files (one
// truncated under a running server loses its freelist page), or faults
// reading through its memory map past the file's new end; both become
// ErrCorrupt (debug.SetPanicOnFault turns the fault into a panic, as it is
// meant to for memory-mapped files), so a damaged log stops `serve` and
// `wal verify` with an error naming the file instead of a crash dump.
func openBolt(path string, o *bolt.Options) (db *bolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, fmt.Errorf("%w: %s is damaged: %v", ErrCorrupt, path, p)
		}
	}()
	return bolt.Open(path, 0o600, o)
}

// viewRecovering runs fn in a read transaction. bbolt panics when a page it
// reads is damaged (a file truncated or overwritten under it); that panic
// becomes ErrCorrupt, so readers fail closed and `wal verify` reports the
// damage instead of crashing. bbolt rolls the transaction back itself. A
// fault on a page past the end of a truncated file is a panic here too
// (see openBolt).
func viewRecovering(b *bolt.DB, path string, fn func(*Tx) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: reading %s: %v", ErrCorrupt, path, p)
		}
	}()
	return b.View(func(btx *bolt.Tx) error { return fn(&Tx{btx: btx}) })
}
