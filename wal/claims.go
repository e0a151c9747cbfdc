package wal

import (
	"context"
	"sync"
)

// claims are the idempotency keys and repair sessions being decided by
// this process. A bbolt log has one process writing it (the file lock), so
// holding them in memory is holding them for every writer.
type claims struct {
	mu       sync.Mutex
	keys     map[string]bool
	sessions map[string]*sessionLock
}

type sessionLock struct {
	held chan struct{} // holds one token while a submission is decided
	refs int
}

// ClaimIdempotency takes an idempotency key until release is called; a key
// already held is ErrInProgress.
func (db *DB) ClaimIdempotency(ctx context.Context, key string) (release func(), err error) {
	c := &db.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys[key] {
		return nil, ErrInProgress
	}
	if c.keys == nil {
		c.keys = map[string]bool{}
	}
	c.keys[key] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			delete(c.keys, key)
			c.mu.Unlock()
		})
	}, nil
}

// LockSession serialises the submissions of one repair session, waiting
// while another holds it, until ctx ends.
func (db *DB) LockSession(ctx context.Context, key string) (unlock func(), err error) {
	c := &db.claims
	c.mu.Lock()
	l := c.sessions[key]
	if l == nil {
		if c.sessions == nil {
			c.sessions = map[string]*sessionLock{}
		}
		l = &sessionLock{held: make(chan struct{}, 1)}
		c.sessions[key] = l
	}
	l.refs++
	c.mu.Unlock()
	release := func() {
		c.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(c.sessions, key)
		}
		c.mu.Unlock()
	}
	select {
	case l.held <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-l.held; release() }) }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
