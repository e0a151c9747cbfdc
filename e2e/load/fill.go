package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/submit"
	"github.com/contractrefine/autonomy/wal"
)

// fillChunk is how many preflights share one commit while filling.
const fillChunk = 2000

// template is a real one-step tool.echo decision, made by the verifier
// under the embedded bundle, whose ids are swapped for fresh ones per
// preflight: filling a million frames cannot afford the verifier each time.
// Each copy is recorded as the preflight core records a decision
// (submit.Service.Recorder).
type template struct {
	d        preflight.Decision
	decision []byte
	pfID     []byte
	auditID  []byte
	record1  func(d *preflight.Decision, out []byte, now time.Time) (wal.PreflightRecord, error)
	revision string
}

func newTemplate(ctx context.Context, db *wal.DB, now time.Time, window time.Duration) (*template, error) {
	b, err := bundle.Load(ctx, "", nil)
	if err != nil {
		return nil, err
	}
	svc := submit.New(submit.Options{
		Verifier: preflight.NewVerifier(preflight.Options{BindingWindow: window, Now: func() time.Time { return now }}),
		Store:    db, Bundle: func() submit.Bundle { return b }, BindingWindow: window, Now: func() time.Time { return now },
	})
	body := preflightBody("session:fill")
	ans, e := svc.Submit(ctx, submit.Submission{Body: body, DryRun: true})
	if e != nil {
		return nil, e
	}
	d := ans.Decision
	if d.Outcome != preflight.OutcomePass {
		return nil, fmt.Errorf("load: template preflight is %s (%s)", d.Outcome, d.Reason)
	}
	d.PreflightID, d.AuditID = ids.Preflight(), ids.Audit()
	out, err := d.CanonicalJSON()
	if err != nil {
		return nil, err
	}
	rec, e := svc.Recorder(body, b.Revision())
	if e != nil {
		return nil, e
	}
	return &template{d: *d, decision: out, pfID: []byte(d.PreflightID), auditID: []byte(d.AuditID), record1: rec,
		revision: b.Revision()}, nil
}

// record returns the PreflightRecord of a copy of the template with fresh
// ids, recorded at now and bound until expires.
func (t *template) record(now, expires time.Time) (wal.PreflightRecord, error) {
	pfID, auditID := ids.Preflight(), ids.Audit()
	out := bytes.Replace(t.decision, t.pfID, []byte(pfID), 1)
	out = bytes.Replace(out, t.auditID, []byte(auditID), 1)
	d := t.d
	d.PreflightID, d.AuditID = pfID, auditID
	d.DecidedAt = now.UTC().Format(time.RFC3339Nano)
	d.Eligibility.ExpiresAt = expires.UTC().Format(time.RFC3339Nano)
	return t.record1(&d, out, now)
}

// fillWAL writes about frames frames into the WAL in dir, in the proportions
// of the service's own traffic (a preflight, its consumed marker frame and
// the allow's decision frame), with bindings that expired a minute ago.
// live > 0 instead writes live one-step bindings, preflight frames only,
// that expire in an hour, and returns their ids. The file is synced and
// its pages dropped from the page cache before it returns (settle), so the
// service opening it neither flushes the fill's writes on its first commit
// nor finds the whole file cached, as a server restarted on an old log would.
func fillWAL(ctx context.Context, dir string, frames, live int) (_ []string, err error) {
	db, err := wal.Open(dir, &wal.Options{NoSync: true})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = settle(filepath.Join(dir, wal.FileName))
		}
	}()
	now := time.Now().UTC()
	tpl, err := newTemplate(ctx, db, now, 5*time.Minute)
	if err != nil {
		return nil, err
	}
	var liveIDs []string
	sets, expires := frames/3, now.Add(-time.Minute)
	if live > 0 {
		sets, expires = live, now.Add(time.Hour)
	}
	for start := 0; start < sets; start += fillChunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := min(fillChunk, sets-start)
		recs := make([]wal.PreflightRecord, n)
		for i := range recs {
			if recs[i], err = tpl.record(now, expires); err != nil {
				return nil, err
			}
			if live > 0 {
				liveIDs = append(liveIDs, recs[i].Binding.PreflightID)
			}
		}
		err := db.Update(ctx, func(tx *wal.Tx) error {
			for _, r := range recs {
				if _, err := tx.RecordPreflight(r); err != nil {
					return err
				}
				if live > 0 {
					continue
				}
				// Consumed the way the gate consumes: the marker, its frame
				// and the decision frame, so the filled log has every index
				// a served one has, and verifies.
				b := &r.Binding
				res, err := tx.Consume(wal.ConsumeRequest{Binding: b, Kind: "tool.echo", RequestID: "fill-" + b.PreflightID, Time: now,
					Decision: func(wal.ConsumeResult) wal.FrameInput {
						return wal.FrameInput{Kind: wal.KindDecision, AuditID: b.AuditID, Time: now,
							Attrs: &wal.DecisionAttrs{Outcome: "allow", Enforced: true, Mode: "enforce",
								Reason: preflight.ReasonPassed, Status: 200, RequestID: "fill-" + b.PreflightID,
								ToolKind: "tool.echo", Method: "POST", Path: "/v1/tool", PreflightID: b.PreflightID,
								StepID: "s1", ArgsDigest: b.Steps[0].ArgsDigest, BundleRevision: &tpl.revision}}
					}})
				if err != nil {
					return err
				}
				if res.Status != wal.Consumed {
					return fmt.Errorf("consume %s: %v", b.PreflightID, res.Status)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("load: fill wal: %w", err)
		}
	}
	return liveIDs, nil
}

// settle syncs the file at path and asks the kernel to drop its pages from
// the page cache (dropCache).
func settle(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return dropCache(f)
}
