package server

import (
	"context"
	"math"
	"net"
	"sync"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/contractrefine/autonomy/internal/config"
)

// The gRPC listener's memory is bounded by its keys (docs/SECURITY.md has
// the arithmetic): at most grpc.max_connections connections, each with at
// most grpc.max_concurrent_streams streams; a stream reserves the largest
// message the listener takes from its headers until its message is in, out
// of grpc.max_bytes_in_flight, and is cancelled when it has not sent its
// message within grpc.receive_timeout. Without these, 10 connections of 250
// streams each sending 1.9 MB of a 2 MB message and never finishing held
// 2.2 GB, for as long as the clients liked.

// recvBudget hands out the reservations of streams being received.
type recvBudget struct {
	mu      sync.Mutex
	free    int64
	msgSize int64
	timeout time.Duration
}

// reservation is one stream's: released once, when its message is in or
// its receive deadline passed.
type reservation struct {
	once    sync.Once
	budget  *recvBudget
	timer   *time.Timer
	cancel  context.CancelFunc
	release func()
}

type reservationKey struct{}

func newRecvBudget(c *config.Config) *recvBudget {
	msg := c.HTTP.MaxBodyBytes + 1<<20
	return &recvBudget{free: c.GRPC.MaxBytesInFlight, msgSize: msg, timeout: c.GRPC.ReceiveTimeout}
}

// tap runs when a stream's headers arrive, before its message is read:
// it reserves the message's room or refuses the stream, and starts the
// receive deadline.
func (b *recvBudget) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	b.mu.Lock()
	if b.free < b.msgSize {
		b.mu.Unlock()
		return nil, status.Error(codes.ResourceExhausted, "grpc.max_bytes_in_flight: too many request messages are being received; retry")
	}
	b.free -= b.msgSize
	b.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	r := &reservation{budget: b, cancel: cancel}
	r.release = func() {
		r.once.Do(func() {
			b.mu.Lock()
			b.free += b.msgSize
			b.mu.Unlock()
		})
	}
	// A stream still sending at the deadline is cancelled: its reader
	// fails, the stream is reset and its buffers are freed.
	r.timer = time.AfterFunc(b.timeout, func() { r.release(); cancel() })
	return context.WithValue(ctx, reservationKey{}, r), nil
}

// received ends the reservation of the stream of ctx: its message is in
// (a unary handler runs), or it is a streaming call, whose messages are
// bounded by max_concurrent_streams and the message size only.
func received(ctx context.Context) *reservation {
	r, _ := ctx.Value(reservationKey{}).(*reservation)
	if r != nil && r.timer.Stop() {
		r.release()
	}
	return r
}

func (b *recvBudget) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if r := received(ctx); r != nil {
		defer r.cancel()
	}
	return h(ctx, req)
}

func (b *recvBudget) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if r := received(ss.Context()); r != nil {
		defer r.cancel()
	}
	return h(srv, ss)
}

// grpcLimitOptions are the server options of the listener's bounds.
func grpcLimitOptions(c *config.Config) []grpc.ServerOption {
	b := newRecvBudget(c)
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(c.GRPC.MaxConcurrentStreams),
		grpc.InTapHandle(b.tap),
		grpc.ChainUnaryInterceptor(b.unary),
		grpc.ChainStreamInterceptor(b.stream),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: c.GRPC.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: c.GRPC.MaxConnectionIdle}),
		// Fixed flow-control windows: room for the largest message on a
		// stream (what its reservation holds), and for the most grpc's
		// own window estimate would grow to on a connection. A window set
		// turns that estimate off: it sent a PING with every request
		// message and read its ack, a write, two reads and the wake-ups
		// between them on every Check (docs/PERFORMANCE.md, "One caller").
		grpc.InitialWindowSize(streamWindow(b.msgSize)),
		grpc.InitialConnWindowSize(max(streamWindow(b.msgSize), connWindowFloor)),
	}
}

// connWindowFloor is the least connection window: grpc's own estimate
// grows the window up to it.
const connWindowFloor = 16 << 20

// streamWindow is the flow-control window of a stream taking messages of
// at most msg bytes, within what HTTP/2 allows.
func streamWindow(msg int64) int32 {
	return int32(min(msg, math.MaxInt32))
}

// limitConnections bounds the connections ln accepts at once.
func limitConnections(ln net.Listener, c *config.Config) net.Listener {
	return netutil.LimitListener(ln, c.GRPC.MaxConnections)
}
