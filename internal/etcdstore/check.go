package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/contractrefine/autonomy/wal"
)

// The problems Check reports.
const (
	// Records in etcd this replica wrote, naming frames its WAL lacks.
	ProblemCopyWithoutFrame    = "copy_without_frame"    // a frame copy of a seq the WAL does not have
	ProblemCopyDiffers         = "copy_differs"          // the copy's hash is not the WAL frame's
	ProblemBindingWithoutFrame = "binding_without_frame" // a binding with no autonomy.preflight frame
	ProblemMarkerWithoutFrame  = "marker_without_frame"  // a consumed marker with no autonomy.preflight_consumed frame
	// Frames of the WAL, younger than record_ttl, whose state etcd lacks.
	ProblemFrameWithoutCopy    = "frame_without_copy"    // no copy of the frame
	ProblemFrameWithoutBinding = "frame_without_binding" // an autonomy.preflight frame with no binding
	ProblemFrameWithoutMarker  = "frame_without_marker"  // an autonomy.preflight_consumed frame with no marker of its request
)

// copiedKinds are the frame kinds the store copies to etcd.
var copiedKinds = []string{wal.KindPreflight, wal.KindDecision, wal.KindConsumed, wal.KindApproval, wal.KindOutcome}

// checkPage is how many keys one read of a check brings.
const checkPage = 512

// CheckProblem is one mismatch between etcd and the replica's WAL.
type CheckProblem struct {
	Problem string `json:"problem"`
	// Seq and Kind name the WAL frame, when there is one.
	Seq  uint64 `json:"seq,omitempty"`
	Kind string `json:"kind,omitempty"`
	// Key is the etcd key, when there is one.
	Key         string `json:"key,omitempty"`
	AuditID     string `json:"audit_id,omitempty"`
	PreflightID string `json:"preflight_id,omitempty"`
}

// CheckReport is what Check found.
type CheckReport struct {
	Replica string `json:"replica"`
	Prefix  string `json:"prefix"`
	// Revision is the etcd revision every read was made at.
	Revision int64 `json:"revision"`
	// Since is the start of the window: frames at or after it must have
	// their state in etcd.
	Since time.Time `json:"since"`
	// Frames is how many frames of this replica the WAL has in the window.
	Frames int `json:"frames"`
	// Copies, Bindings and Markers count the records of this replica in etcd.
	Copies   int `json:"copies"`
	Bindings int `json:"bindings"`
	Markers  int `json:"markers"`
	// Pending counts the copies past the log's head that a kill during a
	// commit left (doc.go, "Frames"): the replica takes them up or deletes
	// them when it next opens, before it appends, so they are no problem.
	Pending  int            `json:"pending"`
	Problems []CheckProblem `json:"problems"`
}

// OK reports whether nothing is amiss.
func (r *CheckReport) OK() bool { return len(r.Problems) == 0 }

// checkMargin (at most half of record_ttl, so a short one still leaves a
// window) keeps frames this close to the window's start out of it: a
// record lives at least record_ttl after its frame's timestamp, but the
// clock of the check and the replica's may differ by a little.
const checkMargin = time.Minute

// Check compares what etcd holds with this replica's WAL, both ways: every
// record this replica wrote (frame copies, bindings, consumed markers) must
// have its frame in the WAL, and every frame of the WAL younger than
// record_ttl must have its copy and its state in etcd. It reads etcd at
// one revision, in pages, and the WAL in bounded read transactions; run it
// on a stopped replica's data directory (the server holds the WAL's lock),
// while the other replicas serve.
func (s *Store) Check(ctx context.Context, now time.Time) (CheckReport, error) {
	c := &checkRun{rep: CheckReport{Replica: s.o.Replica, Prefix: s.o.Prefix, Problems: []CheckProblem{},
		Since: now.Add(-s.o.RecordTTL + min(checkMargin, s.o.RecordTTL/2)).UTC()},
		copies: map[uint64]*etcdCopy{}, bindings: map[string]*etcdBinding{}, markers: map[string][]*etcdMarker{},
		consumedElsewhere: map[consumedCall]bool{}}
	if err := s.readRecords(ctx, c); err != nil {
		return c.rep, err
	}
	head, hash := s.log.Head()
	_, pending, _, err := s.crashCopies(ctx, head, hash, c.rep.Revision)
	if err != nil {
		return c.rep, err
	}
	if len(pending) > 0 {
		keys := make(map[string]bool, len(pending))
		for _, k := range pending {
			keys[k] = true
		}
		for _, cp := range c.copies {
			cp.pending = keys[cp.key]
		}
	}
	// The WAL from as far back as etcd may still hold records (record_ttl
	// and one lease bucket), so every record can find its frame.
	from := now.Add(-s.o.RecordTTL - s.leases.width() - checkMargin)
	err = s.log.Frames(ctx, wal.ExportFilter{Since: from, Kinds: copiedKinds}, func(f *wal.Frame) error {
		if frameReplica(f) == s.o.Replica {
			c.matchFrame(f)
		}
		return nil
	})
	if err != nil {
		return c.rep, err
	}
	c.unmatched(s.o.Replica)
	sortProblems(c.rep.Problems)
	return c.rep, nil
}

// checkRun is one Check: the report, and the records this replica wrote
// as etcd holds them, each marked seen once a frame of the WAL matched it.
type checkRun struct {
	rep      CheckReport
	copies   map[uint64]*etcdCopy     // by seq
	bindings map[string]*etcdBinding  // by preflight id
	markers  map[string][]*etcdMarker // by preflight id
	// consumedElsewhere: the calls whose autonomy.preflight_consumed
	// frame another replica logged (it served the retry of a consume
	// whose answer was lost here), so this replica's marker of the call
	// is on record.
	consumedElsewhere map[consumedCall]bool
}

// consumedCall names a consume: the preflight id and the request id.
type consumedCall struct{ preflightID, requestID string }

// readRecords reads the frame copies this replica wrote, the consumes
// other replicas logged, the bindings and the consumed markers, at one
// revision.
func (s *Store) readRecords(ctx context.Context, c *checkRun) error {
	framesPfx := string(s.p) + "f/"
	err := s.scan(ctx, framesPfx, &c.rep.Revision, func(kv *mvccpb.KeyValue) error {
		// P f/<audit_id>/<replica>/<seq>; ids carry no slash.
		parts := strings.Split(strings.TrimPrefix(string(kv.Key), framesPfx), "/")
		if len(parts) < 3 {
			return nil
		}
		fs, err := wal.DecodeFrameList(kv.Value)
		if err != nil {
			return fmt.Errorf("frame copy %s: %w", kv.Key, err)
		}
		mine := strings.Join(parts[1:len(parts)-1], "/") == s.o.Replica
		for i := range fs {
			f := &fs[i]
			switch {
			case mine:
				c.copies[f.Seq] = &etcdCopy{key: string(kv.Key), f: *f}
			case f.Kind == wal.KindConsumed:
				c.consumedElsewhere[consumedCall{attrString(f, "preflight_id"), attrString(f, "request_id")}] = true
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	bindingsPfx := s.p.binding("")
	err = s.scan(ctx, bindingsPfx, &c.rep.Revision, func(kv *mvccpb.KeyValue) error {
		id := strings.TrimPrefix(string(kv.Key), bindingsPfx)
		_, r, _, err := decodeBindingRecord(id, kv.Value)
		if err != nil {
			return err
		}
		c.bindings[id] = &etcdBinding{key: string(kv.Key), auditID: r.AuditID, replica: r.Replica}
		return nil
	})
	if err != nil {
		return err
	}
	markersPfx := string(s.p) + "c/"
	return s.scan(ctx, markersPfx, &c.rep.Revision, func(kv *mvccpb.KeyValue) error {
		rest := strings.TrimPrefix(string(kv.Key), markersPfx)
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			return fmt.Errorf("%w: marker key %q", wal.ErrCorrupt, kv.Key)
		}
		var m marker
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return fmt.Errorf("%w: marker %q: %v", wal.ErrCorrupt, kv.Key, err)
		}
		id := rest[:i]
		c.markers[id] = append(c.markers[id], &etcdMarker{key: string(kv.Key), m: m})
		return nil
	})
}

// matchFrame marks the records frame f of this replica accounts for, and
// reports what etcd lacks for a frame younger than record_ttl.
func (c *checkRun) matchFrame(f *wal.Frame) {
	at, _ := time.Parse(wal.TimestampFormat, f.Timestamp)
	inWindow := !at.Before(c.rep.Since)
	if inWindow {
		c.rep.Frames++
	}
	problem := func(p string) {
		if inWindow {
			c.rep.Problems = append(c.rep.Problems, CheckProblem{Problem: p, Seq: f.Seq, Kind: f.Kind, AuditID: f.AuditID,
				PreflightID: attrString(f, "preflight_id")})
		}
	}
	if cp := c.copies[f.Seq]; cp != nil {
		cp.seen = true
		if cp.f.Hash != f.Hash {
			c.rep.Problems = append(c.rep.Problems, CheckProblem{Problem: ProblemCopyDiffers, Seq: f.Seq, Kind: f.Kind,
				Key: cp.key, AuditID: f.AuditID})
		}
	} else {
		problem(ProblemFrameWithoutCopy)
	}
	switch f.Kind {
	case wal.KindPreflight:
		if b := c.bindings[attrString(f, "preflight_id")]; b != nil {
			b.seen = true
		} else {
			problem(ProblemFrameWithoutBinding)
		}
	case wal.KindConsumed:
		for _, m := range c.markers[attrString(f, "preflight_id")] {
			if !m.seen && m.m.RequestID == attrString(f, "request_id") {
				m.seen = true
				return
			}
		}
		problem(ProblemFrameWithoutMarker)
	}
}

// unmatched reports the records replica wrote that no frame matched.
func (c *checkRun) unmatched(replica string) {
	for seq, cp := range c.copies {
		c.rep.Copies++
		if cp.pending && !cp.seen {
			c.rep.Pending++
		} else if !cp.seen {
			c.rep.Problems = append(c.rep.Problems, CheckProblem{Problem: ProblemCopyWithoutFrame, Seq: seq, Kind: cp.f.Kind,
				Key: cp.key, AuditID: cp.f.AuditID})
		}
	}
	for id, b := range c.bindings {
		if b.replica != replica {
			continue
		}
		c.rep.Bindings++
		if !b.seen {
			c.rep.Problems = append(c.rep.Problems, CheckProblem{Problem: ProblemBindingWithoutFrame, Key: b.key,
				AuditID: b.auditID, PreflightID: id})
		}
	}
	for id, ms := range c.markers {
		for _, m := range ms {
			if m.m.Replica != replica {
				continue
			}
			c.rep.Markers++
			if !m.seen && !c.consumedElsewhere[consumedCall{id, m.m.RequestID}] {
				c.rep.Problems = append(c.rep.Problems, CheckProblem{Problem: ProblemMarkerWithoutFrame, Key: m.key, PreflightID: id})
			}
		}
	}
}

type etcdCopy struct {
	key  string
	f    wal.Frame
	seen bool
	// pending: past the log's head, settled when the replica opens.
	pending bool
}

type etcdBinding struct {
	key, auditID, replica string
	seen                  bool
}

type etcdMarker struct {
	key  string
	m    marker
	seen bool
}

// attrString is a string attr of f; "" when absent.
func attrString(f *wal.Frame, name string) string {
	var v string
	f.Attr(name, &v)
	return v
}

// scan calls fn with every key under prefix, in pages, all read at one
// revision: *rev, or the first page's when *rev is 0 (then set).
func (s *Store) scan(ctx context.Context, prefix string, rev *int64, fn func(*mvccpb.KeyValue) error) error {
	key, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(checkPage)}
		if *rev != 0 {
			opts = append(opts, clientv3.WithRev(*rev))
		}
		octx, cancel := s.opCtx(ctx)
		resp, err := s.cli.Get(octx, key, opts...)
		err = s.seen(octx, err)
		cancel()
		if err != nil {
			return err
		}
		if *rev == 0 {
			*rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// sortProblems orders problems by kind, then seq, then key, so a report
// reads the same every run.
func sortProblems(ps []CheckProblem) {
	slices.SortFunc(ps, func(a, b CheckProblem) int {
		return cmp.Or(cmp.Compare(a.Problem, b.Problem), cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.Key, b.Key))
	})
}
