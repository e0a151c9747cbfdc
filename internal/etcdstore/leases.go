package etcdstore

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// leases hands out one lease per time bucket (doc.go, "Leases").
type leases struct {
	cli *clientv3.Client
	ttl time.Duration

	mu     sync.Mutex
	bucket int64
	id     clientv3.LeaseID
}

// width is the bucket width: ttl/24, at least a second, at most an hour.
func (l *leases) width() time.Duration {
	return min(max(l.ttl/24, time.Second), time.Hour)
}

// cached returns the lease of now's bucket when it was granted already.
func (l *leases) cached(now time.Time) (clientv3.LeaseID, bool) {
	b := now.UnixNano() / int64(l.width())
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id, l.id != 0 && l.bucket == b
}

// current returns the lease of now's bucket, granting it on the bucket's
// first write.
func (l *leases) current(ctx context.Context, now time.Time) (clientv3.LeaseID, error) {
	w := l.width()
	b := now.UnixNano() / int64(w)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id != 0 && l.bucket == b {
		return l.id, nil
	}
	secs := int64((l.ttl + w + time.Second - 1) / time.Second)
	g, err := l.cli.Grant(ctx, secs)
	if err != nil {
		return 0, err
	}
	l.bucket, l.id = b, g.ID
	return g.ID, nil
}

// forget drops a lease etcd no longer knows, so the next write grants anew.
func (l *leases) forget(id clientv3.LeaseID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id == id {
		l.id = 0
	}
}
