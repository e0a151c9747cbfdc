package etcdstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/contractrefine/autonomy/internal/state"
	"github.com/contractrefine/autonomy/wal"
)

// Errors of the store.
var (
	// ErrUnavailable wraps every failure to reach etcd, or to hear from it
	// within the request timeout: callers deny (503).
	ErrUnavailable = errors.New("etcdstore: etcd unavailable")
)

// Defaults of Options.
const (
	DefaultPrefix         = "/contractrefine/"
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 2 * time.Second
	DefaultRecordTTL      = 24 * time.Hour
	// claimTTL is the lease of the claims and session locks this process
	// holds: how long they outlive its death.
	claimTTL = 10
)

// Options configures Open. Zero values mean the defaults.
type Options struct {
	Endpoints []string
	// Prefix starts every key (store.etcd.prefix).
	Prefix         string
	DialTimeout    time.Duration
	RequestTimeout time.Duration
	// TLS, when set, is the client's TLS configuration.
	TLS *tls.Config
	// RecordTTL is how long records stay readable (store.etcd.record_ttl).
	RecordTTL time.Duration
	// Replica names this replica in markers and frame keys.
	Replica string
	// Log is this replica's WAL: every frame is written there first.
	Log    *wal.DB
	Logger *slog.Logger
	// OnAvailable, when set, is told each change of etcd's availability as
	// this process sees it (a metric).
	OnAvailable func(ok bool)
	// Now is the clock of lease buckets; nil means time.Now.
	Now func() time.Time
	// Inspect opens the store only to read it (`autonomy wal check-store`):
	// the frame copies a crash left past the log's head stay as they are,
	// for the check to report, and the log is not held.
	Inspect bool
}

// Store is the state of internal/state, kept in etcd. It is safe for
// concurrent use by any number of goroutines and processes.
type Store struct {
	// fenceRev is the ModRevision of the replica's fence key (P e/<replica>)
	// that a lone consume's transaction requires, -1 until read (fence.go).
	fenceRev atomic.Int64

	cli *clientv3.Client
	// kv is cli's KV stub, for the requests built in etcd's own types
	// (pbtxn.go), and codec marshals them (txnCodec).
	kv      etcdserverpb.KVClient
	codec   *txnCodec
	o       Options
	log     *wal.DB
	logger  *slog.Logger
	now     func() time.Time
	p       keys
	leases  leases
	locks   keyLocks
	healthy atomic.Bool

	// instance is the log's instance its presence key names ("" when a
	// store opened to inspect finds none); presentUnder the lease that key is
	// held under, clash whether another process holds it (presence.go).
	instance     string
	presentUnder atomic.Int64
	clash        atomic.Bool

	// bg lives as long as the store: the keep-alive of its claim lease,
	// and the senders of the batchers.
	bg   context.Context
	stop context.CancelFunc
	// txns batches the consumes' marker sub-transactions (consume.go)
	// and the frame copies (frames.go) of concurrent calls in shared
	// transactions (txns.go); peeks their reads of markers.
	txns  *batcher[part]
	peeks *batcher[*peekRequest]
	// writes batches the conditional writes of concurrent calls: the
	// preflights' records (writes.go).
	writes *batcher[*condWrite]
	// lost are the copies of failed local commits, which the dropper
	// deletes when dropWake tells it (settle.go); takeUp is set when the
	// failed commit was an answered lone consume's, whose copies the
	// dropper takes up into the log instead.
	dropMu   sync.Mutex
	lost     []*copyRequest
	takeUp   bool
	dropWake chan struct{}
	// refusalsMu guards heldRefusals, the frames of 503 refusals the log
	// refused while held, which it appends once released (refusals.go),
	// and refusalsDropped, those past maxHeldRefusals.
	refusalsMu      sync.Mutex
	heldRefusals    []wal.FrameInput
	refusalsDropped int
	// loneMu guards lone, closed once the log's commit of the last lone
	// consume, which was answered before it (consumeLone), has ended, and
	// loneWaiting, set while a consume waits for it (awaitLone).
	loneMu      sync.Mutex
	lone        chan struct{}
	loneWaiting bool
	// afterSent, set by tests, runs in the log's commit loop once a copy
	// was sent and before the local commit goes to the disk.
	afterSent func()
	// beforeLoneCommit, set by tests, runs before the background commit
	// of an answered lone consume (commitLone).
	beforeLoneCommit func()
	// loneStalled is the last led transaction's commit the shared sender
	// waited ledWait for in vain (awaitLedCommit); loneMu guards it.
	loneStalled chan struct{}
	// ledWait bounds that wait: ledCommitWait, or what a test sets.
	ledWait time.Duration
	// flatAfter holds flat transactions back until this time (Unix
	// nanoseconds) after one failed (flatBackoff).
	flatAfter atomic.Int64
	// refusalLogged: etcd's refusal of a led transaction was logged.
	refusalLogged atomic.Bool
	// awaitingCommit, set by tests, runs when a flat transaction starts
	// to wait for the log's commit of the led transaction before it
	// (awaitCommit).
	awaitingCommit func()
	// recent holds the bindings this replica recorded or read lately
	// (records.go, remember).
	recent *lru.Cache[string, recentBinding]

	sessMu  sync.Mutex
	session *concurrency.Session

	// held are the repair-session locks this process holds, by session
	// key (claims.go, LockSession).
	heldMu sync.Mutex
	held   map[string]*heldSession
	// claims are the idempotency claims this process holds, by key
	// (claims.go, ClaimIdempotency).
	claims map[string]*heldClaim
}

var _ state.Store = (*Store)(nil)

// Open connects to etcd. It does not wait for etcd to answer: a store
// opened while etcd is down serves (and Probe answers) once etcd is back.
// Until it has settled the frame copies a crash left past the log's head
// (settle.go), at once when etcd answers, its log appends nothing.
func Open(o Options) (*Store, error) {
	if len(o.Endpoints) == 0 {
		return nil, errors.New("etcdstore: no endpoints")
	}
	if o.Log == nil {
		return nil, errors.New("etcdstore: no log")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.RecordTTL <= 0 {
		o.RecordTTL = DefaultRecordTTL
	}
	if o.Replica == "" {
		o.Replica = "replica"
	}
	s := &Store{o: o, log: o.Log, logger: o.Logger, now: o.Now, p: keys(o.Prefix), held: map[string]*heldSession{},
		claims: map[string]*heldClaim{}}
	s.fenceRev.Store(-1)
	s.ledWait = ledCommitWait
	instance, err := loadInstance(o.Log.Path(), !o.Inspect)
	if err != nil {
		return nil, err
	}
	s.instance = instance
	if s.logger == nil {
		s.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if s.now == nil {
		s.now = time.Now
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            o.Endpoints,
		DialTimeout:          o.DialTimeout,
		DialKeepAliveTime:    o.RequestTimeout * 5,
		DialKeepAliveTimeout: o.RequestTimeout,
		TLS:                  o.TLS,
		Logger:               zap.NewNop(),
		DialOptions:          DialOptions(o.DialTimeout),
	})
	if err != nil {
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	s.cli, s.kv, s.codec = cli, clientv3.RetryKVClient(cli), newTxnCodec()
	s.bg, s.stop = context.WithCancel(context.Background())
	s.recent, _ = lru.New[string, recentBinding](recentBindings)
	s.txns = s.startTxns()
	s.dropWake = make(chan struct{}, 1)
	go s.dropper()
	s.peeks = s.startPeeker()
	s.writes = s.startWriter()
	s.leases = leases{cli: cli, ttl: o.RecordTTL}
	s.healthy.Store(true)
	if !o.Inspect {
		s.settleOnOpen()
	}
	return s, nil
}

// DialOptions are the gRPC options of the store's etcd client, which
// dials with dialTimeout (store.etcd.dial_timeout). Tools that measure
// etcd beside the store (e2e/load) dial with the same options.
//
// Fixed flow-control windows, as on the service's own gRPC listener: a
// window set turns off grpc's window estimate, which sends a PING with
// the answers it reads and waits for its ack: a write, a read and the
// wake-ups between them for every etcd request. The stream window holds
// the largest request etcd takes by default (--max-request-bytes,
// 1.5 MiB) with room to spare.
//
// Reconnection within seconds of etcd's return: grpc's defaults wait 20 s
// for a connection's handshake and back off up to 120 s between
// attempts, so a replica whose etcd stalled for minutes (a paused
// process, a partition) stayed unready up to two minutes after etcd
// answered again, with no connection open to notice it. An attempt here
// waits dial_timeout for its handshake, and the next follows within
// reconnectMaxDelay.
func DialOptions(dialTimeout time.Duration) []grpc.DialOption {
	if dialTimeout <= 0 {
		dialTimeout = DefaultDialTimeout
	}
	return []grpc.DialOption{
		grpc.WithInitialWindowSize(clientStreamWindow),
		grpc.WithInitialConnWindowSize(clientConnWindow),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: reconnectMaxDelay},
			MinConnectTimeout: dialTimeout,
		}),
	}
}

// reconnectMaxDelay bounds the wait between two attempts to reach an
// etcd member that did not answer (DialOptions).
const reconnectMaxDelay = 2 * time.Second

// clientStreamWindow and clientConnWindow are the etcd client's fixed
// flow-control windows, per stream and per connection.
const (
	clientStreamWindow = 4 << 20
	clientConnWindow   = 16 << 20
)

// Close closes the client; the claims and locks it held go with its
// lease.
func (s *Store) Close() error {
	s.sessMu.Lock()
	if s.session != nil {
		s.session.Orphan()
	}
	s.sessMu.Unlock()
	s.stop()
	return s.cli.Close()
}

// Replica is the replica name the store writes under.
func (s *Store) Replica() string { return s.o.Replica }

// Client is the etcd client (the shared-store check reads through it).
func (s *Store) Client() *clientv3.Client { return s.cli }

// Prefix is the key prefix.
func (s *Store) Prefix() string { return s.o.Prefix }

// Probe reports whether etcd answers a linearizable read (which needs a
// quorum) within the request timeout, and this process holds its
// replica_id (presence.go).
func (s *Store) Probe(ctx context.Context) error {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	_, err := s.cli.Get(octx, s.p.probe(), clientv3.WithCountOnly())
	if err := s.seen(octx, err); err != nil {
		return err
	}
	return s.present(ctx)
}

// Available reports what the last etcd request said of etcd.
func (s *Store) Available() bool { return s.healthy.Load() }

// opCtx bounds one etcd request by the request timeout.
func (s *Store) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.o.RequestTimeout)
}

// thenTxn sends ops as one transaction with no condition, within a
// request timeout, its error as seen returns it.
func (s *Store) thenTxn(ctx context.Context, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(octx).Then(ops...).Commit()
	return resp, s.seen(octx, err)
}

// seen records what an etcd request's error says of etcd's availability
// and returns the error as callers get it: nil, or wrapping
// ErrUnavailable and err (withLease looks for rpctypes.ErrLeaseNotFound
// in it). A request given up by its own caller says nothing of etcd, and
// a lease etcd no longer knows is an answer from it.
func (s *Store) seen(ctx context.Context, err error) error {
	if err == nil {
		s.setAvailable(true, nil)
		return nil
	}
	switch {
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled):
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		s.setAvailable(true, nil)
	default:
		s.setAvailable(false, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// setAvailable logs and reports each change of availability once.
func (s *Store) setAvailable(ok bool, err error) {
	if s.healthy.Swap(ok) == ok {
		return
	}
	if ok {
		s.logger.Info("etcd available again", "endpoints", strings.Join(s.o.Endpoints, ","))
	} else {
		s.logger.Error("etcd unavailable; denying until it answers", "endpoints", strings.Join(s.o.Endpoints, ","), "err", err)
	}
	if s.o.OnAvailable != nil {
		s.o.OnAvailable(ok)
	}
}

// concSession returns this process's lease for claims and locks, making a
// new one when the last was lost (etcd down longer than its TTL).
func (s *Store) concSession(ctx context.Context) (*concurrency.Session, error) {
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	if s.session != nil {
		select {
		case <-s.session.Done():
			s.session = nil
		default:
			return s.session, nil
		}
	}
	ctx, cancel := s.opCtx(ctx)
	defer cancel()
	g, err := s.cli.Grant(ctx, claimTTL)
	if err != nil {
		return nil, s.seen(ctx, err)
	}
	sess, err := concurrency.NewSession(s.cli, concurrency.WithLease(g.ID), concurrency.WithContext(s.bg))
	if err != nil {
		return nil, s.seen(ctx, err)
	}
	s.session = sess
	return sess, nil
}
