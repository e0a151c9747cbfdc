package wal

import (
	"fmt"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
)

// Damaged files. bbolt reads the file through a memory map and trusts what
// it finds: on a damaged file (one truncated or overwritten under a
// running server) it panics on a failed assertion, or faults reading a
// page past the file's new end. Both are turned into ErrCorrupt here, so
// the service fails closed (503) and `wal verify` names the damage instead
// of the process ending in a crash dump. debug.SetPanicOnFault turns the
// fault into a panic, as it is meant to for memory-mapped files.
//
// A panic can leave bbolt's own locks held (one raised while a transaction
// begins is never unwound), so after the first one the DB is poisoned:
// every later read and write fails at once with ErrCorrupt, and Close
// leaves the bbolt handle alone rather than wait on a lock forever. The
// file was damaged; the process goes on answering, every answer that needs
// the log a 503, until it is restarted on a good file.

// openBolt opens the bbolt file. A panic or fault during the open is
// ErrCorrupt; the half-open handle is left alone (see above).
func openBolt(path string, o *bolt.Options) (db *bolt.DB, err error) {
	p, err := catch(func() (err error) {
		db, err = bolt.Open(path, 0o600, o)
		return err
	})
	if p != nil {
		return nil, fmt.Errorf("%w: %s is damaged: %v", ErrCorrupt, path, p)
	}
	return db, err
}

// guarded runs fn, which uses bbolt, turning a panic or fault into
// ErrCorrupt and poisoning the DB; once poisoned it does not run fn.
func (db *DB) guarded(op string, fn func() error) error {
	if db.poisoned.Load() {
		return fmt.Errorf("%w: %s: an earlier access found the file damaged", ErrCorrupt, db.path)
	}
	p, err := catch(fn)
	if p != nil {
		db.poisoned.Store(true)
		return fmt.Errorf("%w: %s %s: %v", ErrCorrupt, op, db.path, p)
	}
	return err
}

// catch runs fn with faults turned into panics, and returns what fn
// panicked with, if anything, instead of letting the panic through.
func catch(fn func() error) (panicked any, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() { panicked = recover() }()
	return nil, fn()
}

// view runs fn in a bbolt read transaction, guarded.
func (db *DB) view(fn func(*Tx) error) error {
	db.pages.touched()
	return db.guarded("reading", func() error {
		return db.bolt.View(func(btx *bolt.Tx) error { return fn(&Tx{btx: btx}) })
	})
}

// update runs fn in a bbolt write transaction, guarded.
func (db *DB) update(fn func(*bolt.Tx) error) error {
	db.pages.touched()
	return db.guarded("writing", func() error { return db.bolt.Update(fn) })
}
