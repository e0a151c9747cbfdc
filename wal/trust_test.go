package wal

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/contractrefine/autonomy/preflight"
)

// TestVerifyOnOpenRefusesATamperedLog: the attack of a stopped service
// whose consumed marker is deleted (the step could be consumed again) or
// whose binding record is moved a year later. Opened with VerifyOnOpen,
// the log decides nothing: every decision read and every write fails with
// a *VerifyError naming the seq, before as after another request id tries
// the step; what an operator reads (the audit frames, the export, Verify)
// still answers.
func TestVerifyOnOpenRefusesATamperedLog(t *testing.T) {
	type tamper func(t *testing.T, btx *bolt.Tx, b preflightBindingSeq)
	tests := map[string]tamper{
		"consumed marker deleted": func(t *testing.T, btx *bolt.Tx, b preflightBindingSeq) {
			if err := btx.Bucket(bucketAudit).Delete(markerKey(b.b.AuditID, b.b.PreflightID, 0)); err != nil {
				t.Fatal(err)
			}
		},
		"binding record a year later": func(t *testing.T, btx *bolt.Tx, b preflightBindingSeq) {
			edited := b.b
			edited.ExpiresAt = edited.ExpiresAt.AddDate(1, 0, 0)
			if err := btx.Bucket(bucketPreflights).Put([]byte(b.b.PreflightID), encodeBindingRecord(b.seq, &edited)); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, edit := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			ctx := context.Background()
			db, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			b := testBinding("pf_trusttamper00001", "tool.shell")
			f := record(t, db, b)
			res, err := db.Consume(ctx, ConsumeRequest{Binding: &b, Kind: "tool.shell", RequestID: "req-1", Time: t0})
			if err != nil || res.Status != Consumed {
				t.Fatalf("consume: %+v %v", res, err)
			}
			db.Close()
			bdb, err := bolt.Open(dir+"/"+FileName, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := bdb.Update(func(btx *bolt.Tx) error { edit(t, btx, preflightBindingSeq{b, f.Seq}); return nil }); err != nil {
				t.Fatal(err)
			}
			bdb.Close()

			var reported error
			db, err = Open(dir, &Options{VerifyOnOpen: true, OnVerify: func(_ int, _ time.Duration, err error) { reported = err }})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			<-db.Verified()
			var ve *VerifyError
			if err := db.Trusted(); !errors.As(err, &ve) || ve.Seq == 0 || !errors.Is(reported, ErrUnverified) {
				t.Fatalf("Trusted() = %v (reported %v), want a *VerifyError naming a seq", err, reported)
			}
			if _, err := db.Binding(ctx, b.PreflightID); !errors.Is(err, ErrUnverified) {
				t.Errorf("Binding: %v", err)
			}
			if _, err := db.Peek(ctx, ConsumeRequest{Binding: &b, Kind: "tool.shell", RequestID: "req-2"}); !errors.Is(err, ErrUnverified) {
				t.Errorf("Peek: %v", err)
			}
			if res, err := db.Consume(ctx, ConsumeRequest{Binding: &b, Kind: "tool.shell", RequestID: "req-2", Time: t0}); !errors.Is(err, ErrUnverified) {
				t.Errorf("Consume with another request id: %+v %v, want ErrUnverified", res, err)
			}
			if err := db.Probe(ctx); !errors.Is(err, ErrUnverified) {
				t.Errorf("Probe: %v", err)
			}
			if _, err := db.Compact(ctx, t0.Add(time.Hour)); !errors.Is(err, ErrUnverified) {
				t.Errorf("Compact: %v", err)
			}
			if frames, err := db.AuditFrames(ctx, b.AuditID); err != nil || len(frames) == 0 {
				t.Errorf("AuditFrames: %d frames, %v", len(frames), err)
			}
			var out bytes.Buffer
			if n, err := db.Export(ctx, &out, ExportFilter{}); err != nil || n != 2 {
				t.Errorf("Export: %d frames, %v", n, err)
			}
		})
	}
}

type preflightBindingSeq struct {
	b   preflight.Binding
	seq uint64
}

// TestBindingEditedWhileOpen: a binding record edited while the log is
// open (the service running) is caught on the next read of it, which the
// gate makes on a binding-cache miss: Binding fails naming the frame's
// seq, and the log is trusted no more.
func TestBindingEditedWhileOpen(t *testing.T) {
	ctx := context.Background()
	var reported []error
	db := openTest(t, &Options{VerifyOnOpen: true, OnVerify: func(_ int, _ time.Duration, err error) { reported = append(reported, err) }})
	<-db.Verified()
	if err := db.Trusted(); err != nil {
		t.Fatalf("an empty log: %v", err)
	}
	b := testBinding("pf_trustlive000001", "tool.shell")
	f := record(t, db, b)
	other := testBinding("pf_trustlive000002", "tool.echo")
	record(t, db, other)
	if got, err := db.Binding(ctx, b.PreflightID); err != nil || !got.ExpiresAt.Equal(b.ExpiresAt) {
		t.Fatalf("untouched: %+v %v", got, err)
	}
	edited := b
	edited.Steps = slices.Clone(b.Steps)
	edited.ExpiresAt = edited.ExpiresAt.AddDate(1, 0, 0)
	// Behind the log's back, as a process writing the file would.
	if err := db.bolt.Update(func(btx *bolt.Tx) error {
		return btx.Bucket(bucketPreflights).Put([]byte(b.PreflightID), encodeBindingRecord(f.Seq, &edited))
	}); err != nil {
		t.Fatal(err)
	}
	_, err := db.Binding(ctx, b.PreflightID)
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.Seq != f.Seq {
		t.Fatalf("Binding of the edited record: %v, want a *VerifyError at seq %d", err, f.Seq)
	}
	if _, err := db.Binding(ctx, other.PreflightID); !errors.Is(err, ErrUnverified) {
		t.Errorf("another binding after that: %v, want ErrUnverified", err)
	}
	if _, err := db.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: "au_x", Time: t0}); !errors.Is(err, ErrUnverified) {
		t.Errorf("a write after that: %v, want ErrUnverified", err)
	}
	if len(reported) != 2 || reported[0] != nil || !errors.Is(reported[1], ErrUnverified) {
		t.Errorf("OnVerify calls: %v, want nil then the failure", reported)
	}
}

// TestCloseDuringVerificationIsNoFailure: a log closed while its open-time
// verification runs (a server that failed to start after opening it)
// logs no verification failure, which would send an operator looking for
// damage: nothing failed, the walk was cut short.
func TestCloseDuringVerificationIsNoFailure(t *testing.T) {
	dir := t.TempDir()
	fillServed(t, dir, 2000)
	var logs bytes.Buffer
	db, err := Open(dir, &Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), VerifyOnOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waited for the walk's goroutine: its lines are all written.
	if strings.Contains(logs.String(), "wal verified") {
		t.Fatalf("the walk of 6,000 frames ended before Close; the test needs a longer one: %s", logs.String())
	}
	if strings.Contains(logs.String(), "failed verification") {
		t.Fatalf("a close during verification was logged as a failure: %s", logs.String())
	}
}
