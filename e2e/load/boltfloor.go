package main

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// scBoltWrite is the store's own floor: the least durable bbolt write, one
// Update with one small put in a fresh file, measured in this process on
// the file system holding the service's data directory.
const (
	targetStore = "bbolt"
	scBoltWrite = "least durable write"
)

// leastBoltWrite times serial Updates of one 16-byte put each (a new key
// every time) in a fresh bbolt file in dir, for d or at most 5,000 writes,
// after 20 untimed ones.
func leastBoltWrite(ctx context.Context, dir string, d time.Duration) (result, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return result{}, err
	}
	db, err := bolt.Open(filepath.Join(dir, "least.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	bucket := []byte("b")
	var key [8]byte
	value := make([]byte, 16)
	n := uint64(0)
	put := func() error {
		n++
		binary.BigEndian.PutUint64(key[:], n)
		return db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(bucket)
			if err != nil {
				return err
			}
			return b.Put(key[:], value)
		})
	}
	for range 20 {
		if err := put(); err != nil {
			return result{}, err
		}
	}
	var lat []time.Duration
	start := time.Now()
	for len(lat) < 5000 && time.Since(start) < d && ctx.Err() == nil {
		t0 := time.Now()
		if err := put(); err != nil {
			return result{}, err
		}
		lat = append(lat, time.Since(t0))
	}
	r := summarize(1, lat, time.Since(start))
	return r, ctx.Err()
}
