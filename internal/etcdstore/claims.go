package etcdstore

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/contractrefine/autonomy/wal"
)

// ClaimIdempotency takes an idempotency key for every replica: a key
// created under this process's claim lease, so a holder that dies frees
// it within that lease's TTL.
func (s *Store) ClaimIdempotency(ctx context.Context, key string) (release func(), err error) {
	sess, err := s.concSession(ctx)
	if err != nil {
		return nil, err
	}
	k := s.p.claim(key)
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, s.o.Replica, clientv3.WithLease(sess.Lease()))).Commit()
	if err = s.seen(octx, err); err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		return nil, wal.ErrInProgress
	}
	rev := resp.Header.Revision
	var once sync.Once
	return func() {
		once.Do(func() {
			// Only this claim is removed, never a later one of the key.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.RequestTimeout)
			defer cancel()
			_, err := s.cli.Txn(dctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", rev)).
				Then(clientv3.OpDelete(k)).Commit()
			if err != nil {
				s.logger.Warn("cannot release idempotency claim; its lease frees it", "err", err)
			}
		})
	}, nil
}

// LockSession serialises a repair session's submissions across replicas:
// first among this process's goroutines, then with an etcd lock held under
// this process's claim lease.
func (s *Store) LockSession(ctx context.Context, key string) (unlock func(), err error) {
	local, err := s.locks.lock(ctx, key)
	if err != nil {
		return nil, err
	}
	sess, err := s.concSession(ctx)
	if err != nil {
		local()
		return nil, err
	}
	m := concurrency.NewMutex(sess, s.p.sessionLock(key))
	if err := m.Lock(ctx); err != nil {
		local()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, s.seen(ctx, err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.RequestTimeout)
			defer cancel()
			if err := m.Unlock(uctx); err != nil {
				s.logger.Warn("cannot release repair-session lock; its lease frees it", "err", err)
			}
			local()
		})
	}, nil
}

// keyLocks are per-key locks among this process's goroutines: the etcd
// lock is per lease, and every goroutine here shares one.
type keyLocks struct {
	mu    sync.Mutex
	held  map[string]chan struct{}
	users map[string]int
}

func (l *keyLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	l.mu.Lock()
	if l.held == nil {
		l.held, l.users = map[string]chan struct{}{}, map[string]int{}
	}
	ch := l.held[key]
	if ch == nil {
		ch = make(chan struct{}, 1)
		l.held[key] = ch
	}
	l.users[key]++
	l.mu.Unlock()
	done := func() {
		l.mu.Lock()
		if l.users[key]--; l.users[key] == 0 {
			delete(l.users, key)
			delete(l.held, key)
		}
		l.mu.Unlock()
	}
	select {
	case ch <- struct{}{}:
		return func() { <-ch; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}
