package wal

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

var (
	// ErrNotFound reports that the requested record is not in the log.
	ErrNotFound = errors.New("wal: not found")
	// ErrClosed reports a write or read after Close.
	ErrClosed = errors.New("wal: closed")
	// ErrCorrupt reports a stored record that does not decode.
	ErrCorrupt = errors.New("wal: corrupt record")
	// ErrFileGone reports that the log file was removed or replaced while open.
	ErrFileGone = errors.New("wal: log file removed or replaced while open")
	// ErrDiskFull reports that the file system holding the log has less
	// than MinFreeBytes free.
	ErrDiskFull = errors.New("wal: file system nearly full")
	// ErrEmptyFile reports a log file of zero bytes to a read-only open:
	// it holds no log (serve starts a new one on it; a file truncated to
	// zero has lost every frame).
	ErrEmptyFile = errors.New("wal: the file is empty (0 bytes) and holds no log; serve starts a new log on it, and every decision recorded before it was emptied is gone")
	// ErrLocked reports that another process holds the log file open.
	ErrLocked = errors.New("wal: log file is locked by another process (is a server running on this data dir?)")
	// ErrVersionMismatch reports a log whose format version this binary
	// does not read (written by a newer one).
	ErrVersionMismatch = errors.New("wal: format version mismatch")
	// ErrInProgress reports an idempotency key another submission holds.
	ErrInProgress = errors.New("wal: idempotency key is being decided")
	// ErrConflict reports a write whose precondition no longer holds: a
	// repair session counted since it was read, or an idempotency key
	// recorded since it was claimed.
	ErrConflict = errors.New("wal: state changed since it was read")
	// ErrHeld reports a write refused while the log is held (staged.go):
	// frames a failed commit had already sent elsewhere, or copies a crash
	// left elsewhere, are not settled yet.
	ErrHeld = errors.New("wal: writes held until frames sent elsewhere are settled")
)

var (
	bucketFrames      = []byte("frames")
	bucketAudit       = []byte("audit")
	bucketPreflights  = []byte("preflights")
	bucketConsumed    = []byte("consumed")
	bucketSessions    = []byte("sessions")
	bucketIdempotency = []byte("idempotency")
	bucketMeta        = []byte("meta")

	// allBuckets are the buckets of a log of format 3. Formats 1 and 2
	// also have bucketConsumed (markers.go).
	allBuckets = [][]byte{bucketFrames, bucketAudit, bucketPreflights,
		bucketSessions, bucketIdempotency, bucketMeta}

	// timeOrdered are the indexes keyed by preflight or audit id.
	timeOrdered = [][]byte{bucketAudit, bucketPreflights}

	keyHead    = []byte("head")
	keyVersion = []byte("version")
	keyBase    = []byte("base")
)

// FormatVersion is the on-disk format this package writes (doc.go). It
// also reads versions 1 and 2: version 2 keeps the consumed markers in a
// bucket of their own (markers.go), and version 1 also packs its large
// frames with DEFLATE alone. A writable Open of a log of either makes it
// version 3: it moves the markers, and the frames it adds may be packed in
// a form version 1 does not read. A log without the meta bucket's
// "version" key was written before the key existed, in version 1.
const FormatVersion = 3

// FileName is the name of the log file inside the data directory.
const FileName = "wal.db"

// Options configures Open. The zero value is the default.
type Options struct {
	// Logger receives commit failures. Nil discards.
	Logger *slog.Logger
	// MaxBatch caps how many queued writes share one commit. Zero means 512.
	MaxBatch int
	// OpenTimeout bounds the wait for the file lock held by another process.
	// Zero means one second.
	OpenTimeout time.Duration
	// NoSync skips fsync. Only benchmarks that measure the floor use it.
	NoSync bool
	// OnCommit, when set, is called after every commit attempt with the
	// number of writes in it, how long it took and its error.
	OnCommit func(writes int, took time.Duration, err error)
	// VerifyOnOpen verifies the whole log in the background after Open;
	// until it has verified, and for good if it fails, nothing is decided
	// from it (trust.go). The service sets it; the CLI tools, which must
	// read and export a log that fails, do not.
	VerifyOnOpen bool
	// OnVerify, when set, is called when the verification VerifyOnOpen
	// started ends (frames checked, how long it took, nil or why the log
	// is not trusted), and again, with zero frames, when a binding record
	// is later found to differ from its frame.
	OnVerify func(frames int, took time.Duration, err error)
	// CompactChunk caps how many frames one compaction transaction removes,
	// so compaction never holds up other writes for long. Zero means 256.
	CompactChunk int
	// Replica, when set, is written into every appended frame's attrs as
	// "replica": the name of the replica that wrote it, so frames gathered
	// from several replicas' logs say where each came from.
	Replica string
	// ReadOnly opens an existing log for reading only (the CLI's verify,
	// export and audit): it needs read access to the file alone, creates
	// nothing, and every write fails. A server's lock still keeps it out.
	ReadOnly bool
	// CheckPages makes a read-only Open read the file's freelist, as a
	// writable open does, so that a damaged one is ErrCorrupt here too and
	// DB.CheckPages can check every page (`wal verify` sets it). Without
	// it a read-only open leaves the freelist unread.
	CheckPages bool

	// tune, when set, changes bbolt's options before the file opens: the
	// tests that weigh one setting against another use it.
	tune func(*bolt.Options)
}

// DB is an open log.
type DB struct {
	bolt *bolt.DB
	path string
	log  *slog.Logger
	opts Options
	// replica is opts.Replica as the frames name it.
	replica replicaName
	mu      sync.RWMutex // guards closed
	closed  bool

	// Writes are scheduled here (see Update). wmu guards waiting and
	// leading; slots bounds how many writes wait.
	wmu sync.Mutex
	// waiting are the writes queued for the commit loop, oldest first.
	waiting []*write
	// leading is set while a commit runs or writes wait for one: by the
	// writer that found none running and commits its own write, or by the
	// commit loop. When it is unset nothing waits.
	leading bool
	// idle is signalled when leading is unset; Close waits on it.
	idle sync.Cond
	// leadWants are the writers waiting in Lead for the lead, oldest
	// first: whoever leads hands it to the first when it lets go.
	leadWants []chan struct{}
	slots     chan struct{}
	kick      chan struct{} // wakes the commit loop: writes wait
	stop      chan struct{}
	done      chan struct{}

	// head is the newest committed frame; only the one committing (a lone
	// writer or the commit loop, while leading) changes it.
	head chainPoint
	ino  fileID

	// poisoned is set once bbolt panicked or faulted on the file (open.go).
	poisoned atomic.Bool
	// held is set while the log refuses writes (staged.go).
	held atomic.Bool

	// trust is nil or holds what is known of the log's verification;
	// verified is closed when the open-time verification ends (trust.go).
	trust        atomic.Pointer[trustState]
	verified     chan struct{}
	cancelVerify context.CancelFunc

	// claims holds the idempotency keys and repair sessions being decided
	// (claims.go).
	claims claims

	// ahead writes zeros past the file's high-water mark for the commit
	// loop (ahead.go); nil when not writing ahead.
	ahead *ahead

	// pages schedules the releases of the mapping's pages (resident.go).
	pages *pages

	// beforeLead, set by tests, runs in TryLead between its first look at
	// the hold and taking the lead.
	beforeLead func()
}

type chainPoint struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

// maxWaiting bounds the writes waiting for a commit; an Update past it
// waits, as long as its ctx lets it, for one to be answered.
const maxWaiting = 4096

// write is one queued write; its caller waits on done.
type write struct {
	fn func(*Tx) error
	// stage, when set, is told of the write's frames before the commit
	// goes to the disk, and of that commit's failure (staged.go).
	stage *stage
	// adopt: the write takes up frames and is let through a hold.
	adopt bool
	done  chan error
}

// answer tells the writer how its write ended.
func (db *DB) answer(w *write, err error) {
	<-db.slots
	w.done <- err
}

// Open opens or creates the log at dir/wal.db.
func Open(dir string, opts *Options) (*DB, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 512
	}
	if o.OpenTimeout <= 0 {
		o.OpenTimeout = time.Second
	}
	if !o.ReadOnly {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("open wal %s: %w", dir, err)
		}
	}
	path := filepath.Join(dir, FileName)
	st, err := os.Stat(path)
	emptied := err == nil && st.Size() == 0
	if emptied && o.ReadOnly {
		return nil, fmt.Errorf("open wal %s: %w", path, ErrEmptyFile)
	}
	replica, err := newReplicaName(o.Replica)
	if err != nil {
		return nil, fmt.Errorf("open wal %s: %w", path, err)
	}
	bo := &bolt.Options{Timeout: o.OpenTimeout, NoSync: o.NoSync, FreelistType: bolt.FreelistMapType, ReadOnly: o.ReadOnly,
		PreLoadFreelist: o.CheckPages}
	if o.tune != nil {
		o.tune(bo)
	}
	bdb, err := openBolt(path, bo)
	if errors.Is(err, berrors.ErrTimeout) {
		err = ErrLocked
	}
	if err != nil {
		return nil, fmt.Errorf("open wal %s: %w", path, err)
	}
	db := &DB{bolt: bdb, path: path, log: o.Logger, opts: o, replica: replica,
		slots: make(chan struct{}, maxWaiting), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), verified: make(chan struct{}), pages: newPages()}
	db.idle.L = &db.wmu
	if o.ReadOnly {
		err = db.checkReadOnly()
	} else {
		err = db.prepareWritable()
	}
	if err != nil {
		if !db.poisoned.Load() {
			bdb.Close()
		}
		return nil, fmt.Errorf("open wal %s: %w", path, err)
	}
	if emptied {
		// Not a new data directory: a log that lost its contents (a
		// storage incident, an operator's mistake). Say so once.
		o.Logger.Warn("wal: the file was empty (0 bytes); a new log starts on it, and every decision recorded before it was emptied is gone: restore it from a backup if it held a log", "path", path)
	}
	db.ino, _ = statID(path)
	if !o.NoSync && !o.ReadOnly {
		db.ahead = openAhead(path)
	}
	go db.loop()
	go db.releaseLoop()
	if o.VerifyOnOpen {
		db.startVerify()
	} else {
		close(db.verified)
	}
	return db, nil
}

// Path returns the log file's path.
func (db *DB) Path() string { return db.path }

// Close commits the writes already queued, stops the commit loop and closes
// the file. Writes after Close fail with ErrClosed.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil
	}
	db.closed = true
	db.mu.Unlock()
	if db.cancelVerify != nil {
		db.cancelVerify()
		<-db.verified
	}
	// Nothing can be queued any more (closed is set), and whoever leads
	// commits everything queued before it lets go: once nothing leads,
	// every write is answered. Close then leads for good.
	db.wmu.Lock()
	for db.leading {
		db.idle.Wait()
	}
	db.leading = true
	db.wmu.Unlock()
	close(db.stop)
	<-db.done
	db.closePages()
	db.ahead.close()
	if db.poisoned.Load() {
		return fmt.Errorf("%w: %s: closed without releasing the damaged file", ErrCorrupt, db.path)
	}
	return db.bolt.Close()
}

// Update runs fn in a read-write transaction and returns once the
// transaction is durable on disk (or failed). Concurrent callers share
// commits. fn may run more than once (see the package doc) and must not
// retain the Tx.
//
// A writer that finds no commit running commits its own write at once, in
// its own goroutine: a lone writer waits on nothing but its commit. Writes
// that arrive while a commit runs queue, and the commit loop commits them
// together, up to MaxBatch at a time, until none is left.
func (db *DB) Update(ctx context.Context, fn func(*Tx) error) error {
	return db.enqueue(ctx, &write{fn: fn})
}

// enqueue is Update for a write made up by the caller.
func (db *DB) enqueue(ctx context.Context, w *write) error {
	if err := db.Trusted(); err != nil {
		return err
	}
	if !w.adopt && db.held.Load() {
		return ErrHeld
	}
	w.done = make(chan error, 1)
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return ErrClosed
	}
	// A free slot is taken whatever ctx says: select would pick at random
	// between it and a ctx already done, and drop a write its caller could
	// still make (a deny's decision frame, for a client that has gone).
	select {
	case db.slots <- struct{}{}:
	default:
		select {
		case db.slots <- struct{}{}:
		case <-ctx.Done():
			db.mu.RUnlock()
			return ctx.Err()
		}
	}
	db.wmu.Lock()
	lone := !db.leading
	if lone {
		db.leading = true
	} else {
		db.waiting = append(db.waiting, w)
	}
	db.wmu.Unlock()
	db.mu.RUnlock()
	if lone {
		db.commitLone(w)
	}
	// Once queued the write will be committed or failed; wait for it even if
	// ctx ends, so a caller never answers before knowing what happened.
	return <-w.done
}

// commitLone commits the write of a writer that found no commit running,
// then lets go of the lead, even should the commit panic.
func (db *DB) commitLone(w *write) {
	defer db.release()
	db.commit([]*write{w})
}

// release ends a lone writer's lead: the writes queued during its commit
// go to the commit loop.
func (db *DB) release() {
	db.wmu.Lock()
	if db.handOff() {
		db.wmu.Unlock()
		return
	}
	if len(db.waiting) == 0 {
		db.leading = false
		db.idle.Broadcast()
		db.wmu.Unlock()
		return
	}
	db.wmu.Unlock()
	// Never blocks: a kick is sent only while leading, and the loop takes
	// it before it lets go of the lead.
	db.kick <- struct{}{}
}

// View runs fn in a read-only transaction. A damaged page makes it return
// ErrCorrupt rather than panic.
func (db *DB) View(fn func(*Tx) error) error {
	db.mu.RLock()
	closed := db.closed
	db.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	return db.view(fn)
}

// loop commits the writes that queued while a lone writer committed, batch
// after batch, and lets go of the lead when none is left.
func (db *DB) loop() {
	defer close(db.done)
	batch := make([]*write, 0, db.opts.MaxBatch)
	for {
		select {
		case <-db.kick:
		case <-db.stop:
			return
		}
		for {
			if batch = db.take(batch[:0]); len(batch) == 0 {
				break
			}
			db.commit(batch)
		}
	}
}

// take appends to batch the oldest queued writes, up to MaxBatch; when
// none is queued it lets go of the lead instead.
func (db *DB) take(batch []*write) []*write {
	db.wmu.Lock()
	defer db.wmu.Unlock()
	if db.handOff() {
		return batch // the lead is the waiter's now; its release kicks the loop
	}
	n := min(len(db.waiting), db.opts.MaxBatch)
	if n == 0 {
		db.leading = false
		db.idle.Broadcast()
		return batch
	}
	batch = append(batch, db.waiting[:n]...)
	rest := copy(db.waiting, db.waiting[n:])
	clear(db.waiting[rest:])
	db.waiting = db.waiting[:rest]
	return batch
}

// commit runs the batch in one transaction. A writer whose function fails is
// answered with its error and the rest are retried without it.
func (db *DB) commit(batch []*write) {
	for len(batch) > 0 {
		if batch = db.refuseHeld(batch); len(batch) == 0 {
			return
		}
		start := time.Now()
		failed := -1
		var fnErr error
		head := db.head
		base, staged := head, false
		// A file no longer at the log's path gets no writes: they would be
		// lost, and skipping them keeps it as it was should it come back.
		err := db.checkFile()
		if err == nil {
			err = db.update(func(btx *bolt.Tx) error {
				if err := db.ahead.before(btx.Size()); err != nil {
					return err
				}
				// Frames are keyed by a growing seq, so pages are filled to the
				// brim instead of being split in half (bbolt's default suits
				// random inserts and would leave the log half empty).
				btx.Bucket(bucketFrames).FillPercent = 1.0
				// Preflight and audit ids begin with their time (internal/ids),
				// so these indexes too grow mostly at their end; a little room
				// is left for the keys of one millisecond that arrive late.
				for _, name := range timeOrdered {
					btx.Bucket(name).FillPercent = 0.9
				}
				tx := &Tx{btx: btx, head: &head, writing: true, replica: db.replica}
				for i, w := range batch {
					if err := w.fn(tx); err != nil {
						failed, fnErr = i, err
						return err
					}
				}
				if tx.appended {
					b, _ := json.Marshal(head)
					if err := btx.Bucket(bucketMeta).Put(keyHead, b); err != nil {
						return err
					}
				}
				// Every write ran: the frames' seqs and hashes are final
				// unless the commit itself fails.
				staged = db.sent(batch, base)
				return nil
			})
		}
		if err == nil {
			if err = db.checkFile(); err != nil {
				// The file went away during the commit, which is in the
				// file this DB holds: the chain must follow it, or the next
				// commit would reuse its seqs should the file come back.
				// Frames sent elsewhere are in it too: no hold.
				db.head = head
				staged = false
			}
		}
		// A writer's own error (an approval already decided) rolls the
		// transaction back and the rest are committed again without it:
		// no commit failed, and the next attempt reports the commit.
		writerFailed := failed >= 0 && errors.Is(err, fnErr)
		if db.opts.OnCommit != nil && !writerFailed {
			db.opts.OnCommit(len(batch), time.Since(start), err)
		}
		switch {
		case err == nil:
			db.head = head
			for _, w := range batch {
				db.answer(w, nil)
			}
			return
		case writerFailed:
			db.answer(batch[failed], fnErr)
			batch = append(batch[:failed:failed], batch[failed+1:]...)
		default:
			db.log.Error("wal commit failed", "writes", len(batch), "err", err)
			if staged {
				db.lost(batch)
			}
			err = fmt.Errorf("wal commit: %w", err)
			for _, w := range batch {
				db.answer(w, err)
			}
			return
		}
	}
}

// checkFile reports ErrFileGone when the file at the log's path is no longer
// the one this DB has open: writes to an unlinked file would be lost.
func (db *DB) checkFile() error {
	id, err := statID(db.path)
	if err != nil || id != db.ino {
		return ErrFileGone
	}
	return nil
}

// Probe commits an empty write and reports whether the log can write now.
// It also fails while the file system has less than MinFreeBytes free: on a
// full disk bbolt goes on reusing freed pages for a write as small as the
// probe's while frames that need new pages fail.
func (db *DB) Probe(ctx context.Context) error {
	if free, ok := freeBytes(filepath.Dir(db.path)); ok && free < MinFreeBytes {
		return fmt.Errorf("%w: %d bytes free for %s", ErrDiskFull, free, db.path)
	}
	return db.Update(ctx, func(tx *Tx) error {
		return tx.btx.Bucket(bucketMeta).Put([]byte("probe"), []byte{1})
	})
}

// Head returns the seq and hash of the newest committed frame.
func (db *DB) Head() (seq uint64, hash string) {
	var h chainPoint
	_ = db.View(func(tx *Tx) error {
		if v := tx.btx.Bucket(bucketMeta).Get(keyHead); v != nil {
			return json.Unmarshal(v, &h)
		}
		return nil
	})
	return h.Seq, h.Hash
}

// Tx is a transaction on the log, given to Update and View functions.
type Tx struct {
	btx      *bolt.Tx
	head     *chainPoint
	writing  bool
	appended bool
	replica  replicaName // Options.Replica
}

// Append adds a frame to the log, assigning its seq and chain hash.
func (tx *Tx) Append(in FrameInput) (Frame, error) {
	f, _, err := tx.append(in)
	return f, err
}

// append is Append, also returning the frame as stored.
func (tx *Tx) append(in FrameInput) (Frame, []byte, error) {
	if !tx.writing {
		return Frame{}, nil, errors.New("wal: append in a read-only transaction")
	}
	f, stored, err := chainFrame(in, *tx.head, tx.replica)
	if err != nil {
		return Frame{}, nil, err
	}
	if err := tx.put(&f, stored); err != nil {
		return Frame{}, nil, err
	}
	return f, stored, nil
}

// chainFrame is the frame in makes appended after head by a log naming
// replica, and the bytes the log stores for it.
func chainFrame(in FrameInput, head chainPoint, replica replicaName) (Frame, []byte, error) {
	if strings.ContainsAny(in.AuditID, "\x00\x01") {
		// A marker's key ends its audit id at the first 0x01 and its
		// preflight id at 0x00 (markers.go), and an entry's ends the
		// audit id at 0x00: ids holding them would not split back.
		return Frame{}, nil, fmt.Errorf("wal: audit id %q holds a byte 0x00 or 0x01", in.AuditID)
	}
	attrs, err := encodeNamed(in.Attrs, replica)
	if err != nil {
		return Frame{}, nil, err
	}
	f := Frame{
		Seq:       head.Seq + 1,
		Kind:      in.Kind,
		Timestamp: in.Time.UTC().Format(TimestampFormat),
		AuditID:   in.AuditID,
		Attrs:     attrs.canonical,
		PrevHash:  head.Hash,
	}
	f.Hash = f.computeHash()
	var stored []byte
	if attrs.packed != nil {
		stored = f.encodePacked(packS2Dict1, attrs.packed)
	} else {
		stored = f.encode()
	}
	return f, stored, nil
}

// put stores f, in its stored form, as the log's new head, with its audit
// index entry.
func (tx *Tx) put(f *Frame, stored []byte) error {
	key := seqKey(f.Seq)
	if err := tx.btx.Bucket(bucketFrames).Put(key[:], stored); err != nil {
		return err
	}
	if f.AuditID != "" {
		if err := tx.btx.Bucket(bucketAudit).Put(auditKey(f.AuditID, f.Seq), nil); err != nil {
			return err
		}
	}
	tx.head.Seq, tx.head.Hash = f.Seq, f.Hash
	tx.appended = true
	return nil
}

// Frame returns the frame with the given seq.
func (tx *Tx) Frame(seq uint64) (Frame, error) {
	key := seqKey(seq)
	v := tx.btx.Bucket(bucketFrames).Get(key[:])
	if v == nil {
		return Frame{}, ErrNotFound
	}
	return DecodeFrame(v)
}

func seqKey(seq uint64) [8]byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k
}

func auditKey(auditID string, seq uint64) []byte {
	k := make([]byte, 0, len(auditID)+9)
	k = append(k, auditID...)
	k = append(k, 0)
	s := seqKey(seq)
	return append(k, s[:]...)
}

// readHead reads the newest frame's chain point from meta: the head, or
// the base of a log whose frames compaction all removed.
func (db *DB) readHead(meta *bolt.Bucket) error {
	if v := meta.Get(keyHead); v != nil {
		return json.Unmarshal(v, &db.head)
	}
	if v := meta.Get(keyBase); v != nil {
		return json.Unmarshal(v, &db.head)
	}
	return nil
}

// checkReadOnly checks, writing nothing, that the log is one this binary
// reads, of any version it reads, and reads its head.
func (db *DB) checkReadOnly() error {
	return db.view(func(tx *Tx) error {
		for _, name := range allBuckets {
			if tx.btx.Bucket(name) == nil {
				return fmt.Errorf("%w: no %s bucket: not a log this binary wrote", ErrCorrupt, name)
			}
		}
		if _, err := checkVersion(tx.btx, false); err != nil {
			return err
		}
		return db.readHead(tx.btx.Bucket(bucketMeta))
	})
}

// prepareWritable makes the log one this binary writes, in one
// transaction: the buckets a new log lacks, an older format upgraded (its
// markers moved), and its head read. It logs an upgrade.
func (db *DB) prepareWritable() error {
	var (
		upgraded       bool
		moved, dropped int
	)
	err := db.update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		var err error
		if upgraded, err = checkVersion(tx, true); err != nil {
			return err
		}
		if moved, dropped, err = moveMarkers(tx); err != nil {
			return err
		}
		return db.readHead(tx.Bucket(bucketMeta))
	})
	if err == nil && upgraded {
		db.log.Info("wal format upgraded: the log now records format version "+strconv.Itoa(FormatVersion)+
			"; binaries that read only older versions refuse it", "path", db.path,
			"consumed_markers_moved", moved, "consumed_markers_dropped", dropped)
	}
	return err
}

// checkVersion refuses a log of a format version this binary does not
// read: a value other than "1", "2" or "3", exactly, or a log whose
// consumed bucket says another version than its key (markers.go: a log has
// that bucket exactly while it is of version 1 or 2). When writable, it
// records FormatVersion in a log of an older one (or of none: written
// before the key existed, or new) and reports whether that log held
// frames, whose format it then changed; the caller moves its markers.
func checkVersion(btx *bolt.Tx, writable bool) (upgraded bool, err error) {
	meta := btx.Bucket(bucketMeta)
	v := meta.Get(keyVersion)
	legacy := btx.Bucket(bucketConsumed) != nil
	existing := v != nil || meta.Get(keyHead) != nil
	switch string(v) {
	case strconv.Itoa(FormatVersion):
		if legacy {
			return false, fmt.Errorf("%w: a version %d log with a consumed bucket", ErrCorrupt, FormatVersion)
		}
		return false, nil
	case "1", "2":
	default:
		if v != nil {
			return false, fmt.Errorf("%w: the log is version %q, this binary reads versions 1 to %d", ErrVersionMismatch, v, FormatVersion)
		}
	}
	if existing && !legacy {
		return false, fmt.Errorf("%w: a version %s log without its consumed bucket", ErrCorrupt, cmp.Or(string(v), "1"))
	}
	if !writable {
		return false, nil
	}
	return existing, meta.Put(keyVersion, []byte(strconv.Itoa(FormatVersion)))
}
