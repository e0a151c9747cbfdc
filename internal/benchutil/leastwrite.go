package benchutil

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// LeastWriter makes least durable writes, the store's own floor: serial
// Updates of one 16-byte put each (a new key every time) in a fresh bbolt
// file. The load command makes one after each serial consume; the WAL's
// commit benchmarks make them beside its commits.
type LeastWriter struct {
	db *bolt.DB
	n  uint64
}

// NewLeastWriter opens a fresh file in dir, on the file system whose
// floor it measures, and makes 20 untimed writes.
func NewLeastWriter(dir string) (*LeastWriter, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	db, err := bolt.Open(filepath.Join(dir, "least.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	w := &LeastWriter{db: db}
	for range 20 {
		if err := w.Write(); err != nil {
			db.Close()
			return nil, err
		}
	}
	return w, nil
}

// Write makes one write.
func (w *LeastWriter) Write() error {
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

// Close closes the file.
func (w *LeastWriter) Close() error { return w.db.Close() }
