package etcdstore

import (
	"context"
	"math"
	"math/bits"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// The consume's hot path (the shared transactions of txns.go and
// consumeLone) builds its requests in etcd's own protobuf types rather
// than with clientv3's Op and Txn, which copy every key and value twice
// (string to Op, Op to request) and allocate each operation, comparison
// and branch on its own: dozens of each per transaction at 64 callers. A
// txnBuf allocates the messages of one request in a few chunks, and a
// value goes out as the bytes the store encoded (a frame as the log
// stored it). The keys and values are those of doc.go either way.

// txnBuf holds the messages of one transaction request. Every message it
// hands out stays where it is: a full chunk is followed by a new one.
type txnBuf struct {
	puts     []putMsgs
	ranges   []rangeMsgs
	txns     []txnMsgs
	cmps     []cmpMsgs
	opLists  []*pb.RequestOp
	cmpLists []*pb.Compare
}

// putMsgs, rangeMsgs and txnMsgs are the messages of one operation: the
// RequestOp, its oneof wrapper and the request; cmpMsgs those of one
// comparison.
type (
	putMsgs struct {
		op  pb.RequestOp
		req pb.RequestOp_RequestPut
		put pb.PutRequest
	}
	rangeMsgs struct {
		op  pb.RequestOp
		req pb.RequestOp_RequestRange
		rng pb.RangeRequest
	}
	txnMsgs struct {
		op  pb.RequestOp
		req pb.RequestOp_RequestTxn
		txn pb.TxnRequest
	}
	cmpMsgs struct {
		cmp pb.Compare
		rev pb.Compare_CreateRevision
	}
)

// newTxnBuf sizes a txnBuf for subs sub-transactions of an attempt
// (attempt.opIn) and puts more puts.
func newTxnBuf(subs, puts int) *txnBuf {
	return &txnBuf{
		puts:     make([]putMsgs, 0, subs+puts),
		ranges:   make([]rangeMsgs, 0, 2*subs),
		txns:     make([]txnMsgs, 0, subs),
		cmps:     make([]cmpMsgs, 0, 2*subs),
		opLists:  make([]*pb.RequestOp, 0, 3*subs),
		cmpLists: make([]*pb.Compare, 0, 2*subs),
	}
}

// next is a new zero element at the end of *s, in a new chunk when *s is
// full, so the elements handed out before stay where they are.
func next[T any](s *[]T) *T {
	if len(*s) == cap(*s) {
		*s = make([]T, 0, max(2*cap(*s), 8))
	}
	*s = (*s)[:len(*s)+1]
	return &(*s)[len(*s)-1]
}

// carve is n new zero elements at the end of *s, as next.
func carve[T any](s *[]T, n int) []T {
	if cap(*s)-len(*s) < n {
		*s = make([]T, 0, max(2*cap(*s), n, 8))
	}
	l := len(*s)
	*s = (*s)[:l+n]
	return (*s)[l : l+n : l+n]
}

// put is clientv3.OpPut(key, value, clientv3.WithLease(lease)).
func (b *txnBuf) put(key, value []byte, lease clientv3.LeaseID) *pb.RequestOp {
	m := next(&b.puts)
	m.put.Key, m.put.Value, m.put.Lease = key, value, int64(lease)
	m.req.RequestPut, m.op.Request = &m.put, &m.req
	return &m.op
}

// rng is clientv3.OpGet(key) over [key, end) (end nil: key alone),
// counting only when countOnly is set.
func (b *txnBuf) rng(key, end []byte, countOnly bool) *pb.RequestOp {
	m := next(&b.ranges)
	m.rng.Key, m.rng.RangeEnd, m.rng.CountOnly = key, end, countOnly
	m.req.RequestRange, m.op.Request = &m.rng, &m.req
	return &m.op
}

// txn is clientv3.OpTxn(cmps, then, els).
func (b *txnBuf) txn(cmps []*pb.Compare, then, els []*pb.RequestOp) *pb.RequestOp {
	m := next(&b.txns)
	m.txn.Compare, m.txn.Success, m.txn.Failure = cmps, then, els
	m.req.RequestTxn, m.op.Request = &m.txn, &m.req
	return &m.op
}

// createRevision is clientv3.Compare(clientv3.CreateRevision(key), res, rev).
func (b *txnBuf) createRevision(key []byte, res pb.Compare_CompareResult, rev int64) *pb.Compare {
	m := next(&b.cmps)
	m.rev.CreateRevision = rev
	m.cmp.Result, m.cmp.Target, m.cmp.Key, m.cmp.TargetUnion = res, pb.Compare_CREATE, key, &m.rev
	return &m.cmp
}

// sendTxn sends req as clientv3's Txn().Commit() does: through the
// client's KV stub, with the call options clientv3 gives every request
// (client/v3 options.go: wait for a ready connection, etcd's message
// limits), its error turned into what clientv3 returns.
// The request is marshalled by the store's txnCodec.
func (s *Store) sendTxn(ctx context.Context, req *pb.TxnRequest) (*pb.TxnResponse, error) {
	resp, err := s.kv.Txn(ctx, req, grpc.WaitForReady(true), grpc.MaxCallSendMsgSize(2<<20), grpc.MaxCallRecvMsgSize(math.MaxInt32),
		grpc.ForceCodecV2(s.codec))
	if err != nil {
		return nil, clientv3.ContextError(ctx, err)
	}
	return resp, nil
}

// txnCodec is gRPC's proto codec (which it delegates answers to) but for
// the buffer a request is marshalled into: one of its own pool, not
// cleared first, as the marshalling writes every byte of it. gRPC's
// default pool clears the whole buffer it hands out, and a request of more
// than 32 KiB (a shared transaction of a dozen consumes' markers and
// copies) takes one of 1 MiB. grpc.ForceCodecV2, which sets it for a call,
// is marked experimental in grpc; the version is pinned in go.mod.
type txnCodec struct {
	bufs sync.Pool
}

// newTxnCodec is a txnCodec with an empty pool.
func newTxnCodec() *txnCodec { return &txnCodec{} }

func (c *txnCodec) Name() string { return grpcproto.Name }

func (c *txnCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return encoding.GetCodecV2(grpcproto.Name).Marshal(v)
	}
	size := proto.Size(m)
	buf := c.Get(size)
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:0], m)
	if err != nil {
		c.Put(buf)
		return nil, err
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, c)}, nil
}

func (c *txnCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2(grpcproto.Name).Unmarshal(data, v)
}

// Get is a buffer of size bytes from c's pool, as they were last written
// (mem.BufferPool); one too small is dropped for a new one of the next
// power of two.
func (c *txnCodec) Get(size int) *[]byte {
	if buf, _ := c.bufs.Get().(*[]byte); buf != nil && cap(*buf) >= size {
		*buf = (*buf)[:size]
		return buf
	}
	b := make([]byte, size, max(1<<bits.Len(uint(size)), 4096))
	return &b
}

// Put returns buf to c's pool (mem.BufferPool).
func (c *txnCodec) Put(buf *[]byte) { c.bufs.Put(buf) }
