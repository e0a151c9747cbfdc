package etcdstore

import (
	"bytes"
	"context"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A lone consume's transaction puts its marker and its frames' copies
// together. When its answer is lost (etcd stalled past request_timeout),
// the dropper deletes the copies and the log appends again from their
// seqs; but etcd may apply the transaction later still, even after that
// delete (it handles concurrent requests in no set order), which would put
// copies that name seqs the log has since given to other frames. So the
// transaction also requires the replica's fence key (P e/<replica>) to be
// at the revision the replica last saw, and the dropper moves the fence
// before it deletes anything: a transaction etcd applies after that fails
// its compare and writes nothing. One applied before it is cleaned up by
// the delete, which follows the fence, and its marker is kept in doubt
// (doubt.go).
//
// The fence is a record like the others, under a record lease, so etcd
// does not keep one key for every replica name that ever ran (a
// Deployment's pods are named anew at each start). A transaction never
// requires the fence absent, only at a revision it had: a key that expired
// and was put again has a new revision, and an absent one compares as 0,
// which no put gives, so no transaction sent before either passes its
// compare. A replica that finds the fence absent puts it before its lone
// consume relies on it.

// fence returns the fence's revision a lone consume requires, reading it
// the first time, and putting it when it does not exist (yet, or since
// its lease ran out).
func (s *Store) fence(ctx context.Context) (int64, error) {
	if rev := s.fenceRev.Load(); rev > 0 {
		return rev, nil
	}
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(octx, s.p.fence(s.o.Replica))
	if err = s.seen(octx, err); err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		if err := s.moveFence(ctx); err != nil {
			return 0, err
		}
		return s.fenceRev.Load(), nil
	}
	s.fenceRev.CompareAndSwap(-1, resp.Kvs[0].ModRevision)
	return s.fenceRev.Load(), nil
}

// moveFence puts the fence key under the current record lease, so that no
// lone consume transaction sent before fails to fail its compare, and
// records the new revision.
func (s *Store) moveFence(ctx context.Context) error {
	return s.withLease(ctx, func(lease clientv3.LeaseID) error {
		octx, cancel := s.opCtx(ctx)
		defer cancel()
		resp, err := s.cli.Put(octx, s.p.fence(s.o.Replica), s.o.Replica, clientv3.WithLease(lease))
		if err = s.seen(octx, err); err != nil {
			return err
		}
		s.fenceRev.Store(resp.Header.Revision)
		return nil
	})
}

// fenceMoved reports, from the reads of a lone consume's transaction that
// failed, whether only the fence failed it (the binding there, a's marker
// free): the revision the replica held is stale (another process of its
// name moved it), and is read again next time.
func (s *Store) fenceMoved(a *attempt, rs []*etcdserverpb.ResponseOp, rev int64) {
	if len(rs) != 2 || rs[0].GetResponseRange().GetCount() == 0 {
		return
	}
	for _, kv := range rs[1].GetResponseRange().GetKvs() {
		if bytes.Equal(kv.Key, a.markerKey) {
			return
		}
	}
	s.fenceRev.CompareAndSwap(rev, -1)
}

// fenceCmp is the comparison a lone consume's transaction carries: the
// fence still at rev.
func (s *Store) fenceCmp(rev int64) *etcdserverpb.Compare {
	return &etcdserverpb.Compare{Result: etcdserverpb.Compare_EQUAL, Target: etcdserverpb.Compare_MOD,
		Key: []byte(s.p.fence(s.o.Replica)), TargetUnion: &etcdserverpb.Compare_ModRevision{ModRevision: rev}}
}
