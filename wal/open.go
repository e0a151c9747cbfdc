package wal

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// openBolt opens the bbolt file. bbolt panics on some damaged files (one
// truncated under a running server loses its freelist page); that panic
// becomes ErrCorrupt, so a damaged log stops `serve` and `wal verify` with
// an error naming the file instead of a crash dump.
func openBolt(path string, o *bolt.Options) (db *bolt.DB, err error) {
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, fmt.Errorf("%w: %s is damaged: %v", ErrCorrupt, path, p)
		}
	}()
	return bolt.Open(path, 0o600, o)
}
