package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/contractrefine/autonomy/wal"
)

// ClaimIdempotency takes an idempotency key for every replica: a key
// created under this process's claim lease, so a holder that dies frees
// it within that lease's TTL. The request that takes it also reads the
// key's record, so the holder's Idempotency and RecordPreflight read
// nothing more, and the holder's record releases the claim in its own
// transaction (heldClaim).
func (s *Store) ClaimIdempotency(ctx context.Context, key string) (release func(), err error) {
	sess, err := s.concSession(ctx)
	if err != nil {
		return nil, err
	}
	k := s.p.claim(key)
	w := newCondWrite([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
		func(clientv3.OpOption) []clientv3.Op {
			return []clientv3.Op{clientv3.OpPut(k, s.o.Replica, clientv3.WithLease(sess.Lease())), clientv3.OpGet(s.p.idempotency(key))}
		})
	ok, err := s.write(ctx, w)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, wal.ErrInProgress
	}
	if len(w.resps) != 2 {
		return nil, fmt.Errorf("%w: %d answers to an idempotency claim", ErrUnavailable, len(w.resps))
	}
	h := &heldClaim{claimKey: k, rev: w.rev, known: true}
	if kvs := w.resps[1].GetResponseRange().GetKvs(); len(kvs) > 0 {
		if err := json.Unmarshal(kvs[0].Value, &h.rec); err != nil {
			h.known = false // Idempotency reads it again and reports it
		}
		h.rec.Key, h.found, h.recRev = key, true, kvs[0].ModRevision
	}
	s.heldMu.Lock()
	s.claims[key] = h
	s.heldMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.heldMu.Lock()
			delete(s.claims, key)
			released := h.released
			s.heldMu.Unlock()
			if released {
				return
			}
			// Only this claim is removed, never a later one of the key.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.o.RequestTimeout)
			defer cancel()
			_, err := s.cli.Txn(dctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", h.rev)).
				Then(clientv3.OpDelete(k)).Commit()
			if err != nil {
				s.logger.Warn("cannot release idempotency claim; its lease frees it", "err", err)
			}
		})
	}, nil
}

// heldClaim is an idempotency claim this process holds (one call at a
// time: a held key cannot be claimed again), and what its holder learnt.
type heldClaim struct {
	claimKey string
	rev      int64 // the claim's create revision
	// rec, found and recRev are the key's record as read when the claim
	// was taken (recRev 0: none), valid (known) until the holder records:
	// a record is only written under a claim, and the record's compare
	// of its revision catches a claim lost meanwhile.
	rec    wal.IdempotencyRecord
	found  bool
	recRev int64
	known  bool
	// released: the holder's record deleted the claim.
	released bool
}

// heldRecord is the idempotency record the claim's holder learnt, when
// known.
func (s *Store) heldRecord(key string) (rec wal.IdempotencyRecord, found bool, rev int64, known bool) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if h := s.claims[key]; h != nil && h.known {
		return h.rec, h.found, h.recRev, true
	}
	return wal.IdempotencyRecord{}, false, 0, false
}

// LockSession serialises a repair session's submissions across replicas:
// first among this process's goroutines, then with an etcd lock held under
// this process's claim lease (the layout of concurrency.Mutex: a key per
// lease under the session's lock prefix, the oldest holding the lock). The
// request that takes a free lock also reads the session's counters, so
// the holder's Session and RecordPreflight read nothing more (heldSession).
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
	h, err := s.tryLockSession(ctx, sess, key)
	if err != nil {
		local()
		return nil, err
	}
	if h == nil {
		// Another replica holds it: wait as concurrency.Mutex does, on
		// the same key.
		m := concurrency.NewMutex(sess, s.p.sessionLock(key))
		if err := m.Lock(ctx); err != nil {
			local()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, s.seen(ctx, err)
		}
		h = &heldSession{lockKey: m.Key()}
	}
	s.heldMu.Lock()
	s.held[key] = h
	s.heldMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.heldMu.Lock()
			delete(s.held, key)
			released := h.released
			s.heldMu.Unlock()
			if !released {
				// The lock's lease lives as long as this process, so a
				// delete etcd did not take is tried again until it does:
				// else the session stays locked on every other replica.
				unlock := func() error {
					uctx, cancel := context.WithTimeout(s.bg, s.o.RequestTimeout)
					defer cancel()
					_, err := s.cli.Delete(uctx, h.lockKey)
					return err
				}
				if err := unlock(); err != nil {
					// This process's next holder of the session would
					// take the same key (one per lease): it waits, on
					// the local lock, until the delete is done.
					s.logger.Warn("cannot release repair-session lock yet; retrying until etcd takes it", "err", err)
					go func() {
						_ = s.retry("release a repair-session lock", unlock)
						local()
					}()
					return
				}
			}
			local()
		})
	}, nil
}

// heldSession is a repair-session lock this process holds, by one of its
// goroutines at a time (keyLocks), and what its holder learnt under it.
type heldSession struct {
	lockKey string
	// guard is the session's record as read when the lock was taken,
	// valid (known) until the holder records: no one else writes it while
	// the lock is held, and the record's compare of its revision catches
	// a lock lost meanwhile.
	guard sessionGuard
	known bool
	// released: the holder's record deleted the lock key.
	released bool
}

// sessionGuard is a session's counters and the revision they were read
// at (0: no record).
type sessionGuard struct {
	sess wal.Session
	rev  int64
}

// tryLockSession takes the session's etcd lock when it is free, reading
// the session's record in the same request; nil when another holds it.
func (s *Store) tryLockSession(ctx context.Context, sess *concurrency.Session, key string) (*heldSession, error) {
	pfx := s.p.sessionLock(key) + "/"
	myKey := fmt.Sprintf("%s%x", pfx, sess.Lease())
	owner := clientv3.OpGet(pfx, clientv3.WithFirstCreate()...)
	read := clientv3.OpGet(s.p.session(key))
	// Through the writes' batcher: the locks of concurrent submissions
	// share transactions with each other and with their records.
	w := newCondWrite([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(myKey), "=", 0)},
		func(clientv3.OpOption) []clientv3.Op {
			return []clientv3.Op{clientv3.OpPut(myKey, "", clientv3.WithLease(sess.Lease())), owner, read}
		},
		clientv3.OpGet(myKey), owner, read)
	if _, err := s.write(ctx, w); err != nil {
		return nil, err
	}
	if len(w.resps) != 3 {
		return nil, fmt.Errorf("%w: %d answers to a session lock", ErrUnavailable, len(w.resps))
	}
	myRev := w.rev
	if !w.ok {
		kvs := w.resps[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return nil, fmt.Errorf("%w: session lock %s vanished", ErrUnavailable, myKey)
		}
		myRev = kvs[0].CreateRevision
	}
	if o := w.resps[1].GetResponseRange().GetKvs(); len(o) > 0 && o[0].CreateRevision != myRev {
		return nil, nil
	}
	h := &heldSession{lockKey: myKey, known: true}
	if kvs := w.resps[2].GetResponseRange().GetKvs(); len(kvs) > 0 {
		var err error
		if h.guard, err = decodeSession(key, kvs[0].Value, kvs[0].ModRevision); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// heldGuard is the session's guard its lock's holder learnt, when known.
func (s *Store) heldGuard(key string) (sessionGuard, bool) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	if h := s.held[key]; h != nil && h.known {
		return h.guard, true
	}
	return sessionGuard{}, false
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
