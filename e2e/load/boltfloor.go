package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The store's own floor: the least durable bbolt write, one Update with
// one small put in a fresh file, on the file system holding the service's
// data directory.
const (
	targetStore = "bbolt"
	scBoltWrite = "least durable write"
)

// leastWriter makes least durable writes: serial Updates of one 16-byte
// put each (a new key every time) in a fresh bbolt file. The load command
// makes one after each serial consume (a sampler, drive.go).
type leastWriter struct {
	db *bolt.DB
	n  uint64
}

// newLeastWriter opens a fresh file in dir and makes 20 untimed writes.
func newLeastWriter(dir string) (*leastWriter, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	db, err := bolt.Open(filepath.Join(dir, "least.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	w := &leastWriter{db: db}
	for range 20 {
		if err := w.write(); err != nil {
			db.Close()
			return nil, err
		}
	}
	return w, nil
}

// write makes one write.
func (w *leastWriter) write() error {
	var key [8]byte
	w.n++
	binary.BigEndian.PutUint64(key[:], w.n)
	return w.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		if err != nil {
			return err
		}
		return b.Put(key[:], make([]byte, 16))
	})
}

func (w *leastWriter) close() error { return w.db.Close() }
