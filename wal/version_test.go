package wal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/wal"
)

// The fixture testdata/v1-9a65390.db was written by the service built from
// commit 9a65390, before the log had a format version: one two-step
// preflight (pfFixture, audit id auFixture) whose step s1 was consumed by
// a gated call with x-request-id req-fixture-1 and args {"msg":"hi"}, and
// one tool.echo call without a preflight.
const (
	pfFixture = "pf_-P7ncQf32Z_vMmxWPF7qMVTj"
	auFixture = "au_-P7ncQf3oHTKcsV6uYDJ5xvK"
)

func openFixture(t *testing.T) (*wal.DB, string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "v1-9a65390.db"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, wal.FileName), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := wal.Open(dir, nil)
	if err != nil {
		t.Fatalf("open a log written before format versions: %v", err)
	}
	return db, dir
}

// TestLogWrittenBeforeVersionsServes: a log written by the binary of
// 9a65390 opens (and gets version 2), verifies, and serves its binding,
// its decision and its consumed marker as that binary would.
func TestLogWrittenBeforeVersionsServes(t *testing.T) {
	db, dir := openFixture(t)
	ctx := context.Background()
	if rep, err := db.Verify(ctx); err != nil || !rep.OK() {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
	b, err := db.Binding(ctx, pfFixture)
	if err != nil || b.AuditID != auFixture || len(b.Steps) != 2 || b.ActorID != "user:fixture" {
		t.Fatalf("binding: %+v, %v", b, err)
	}
	if d, err := db.Decision(ctx, pfFixture); err != nil || !json.Valid(d) || !bytes.Contains(d, []byte(pfFixture)) {
		t.Fatalf("decision %s, %v", d, err)
	}
	if found, passed, err := db.ChainStatus(ctx, auFixture, ""); err != nil || !found || !passed {
		t.Fatalf("chain status %v %v %v", found, passed, err)
	}
	call, err := canon.Digest(map[string]any{"msg": "hi"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tc := range []struct {
		requestID string
		want      wal.ConsumeStatus
	}{{"req-fixture-1", wal.Repeated}, {"req-fixture-2", wal.Consumed}, {"req-fixture-3", wal.Replay}} {
		res, err := db.Consume(ctx, wal.ConsumeRequest{Binding: &b, Kind: "tool.echo", RequestID: tc.requestID, CallDigest: call, Time: now})
		if err != nil || res.Status != tc.want {
			t.Fatalf("consume under %s: %+v, %v; want %v", tc.requestID, res, err, tc.want)
		}
	}
	verifiedAtVersion2(t, db, dir)
}

// TestVersion1LogUpgraded: a version 1 log opened read-only stays as it
// was; opened writable it becomes version 2, and a preflight it then
// records (packed in the form version 1 does not read) verifies beside
// the DEFLATE-packed frames of version 1.
func TestVersion1LogUpgraded(t *testing.T) {
	db, dir := openFixture(t)
	db.Close()
	setMeta(t, dir, "version", "1")
	ro, err := wal.Open(dir, &wal.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open of a version 1 log: %v", err)
	}
	if d, err := ro.Decision(context.Background(), pfFixture); err != nil || !bytes.Contains(d, []byte(pfFixture)) {
		t.Fatalf("decision read-only: %s, %v", d, err)
	}
	ro.Close()
	if v := metaVersion(t, dir); v != "1" {
		t.Fatalf("version after a read-only Open: %q, want \"1\"", v)
	}
	var logs bytes.Buffer
	db, err = wal.Open(dir, &wal.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "wal format upgraded") {
		t.Errorf("upgrading a log logged %q, want a line saying so", logs.String())
	}
	ctx := context.Background()
	decision, err := os.ReadFile(filepath.Join("..", "internal", "httpapi", "testdata", "golden", "refund_pass.json"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.Binding(ctx, pfFixture)
	if err != nil {
		t.Fatal(err)
	}
	b.PreflightID, b.AuditID = "pf_upgraded", "au_upgraded"
	if _, err := db.RecordPreflight(ctx, wal.PreflightRecord{Binding: b, Decision: decision, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if d, err := db.Decision(ctx, "pf_upgraded"); err != nil || !bytes.Equal(d, decision) {
		t.Fatalf("decision of the new preflight: %v", err)
	}
	verifiedAtVersion2(t, db, dir)
}

// verifiedAtVersion2 verifies the log db, open on dir, closes it, and
// checks that the file then records format version 2.
func verifiedAtVersion2(t *testing.T, db *wal.DB, dir string) {
	t.Helper()
	if rep, err := db.Verify(context.Background()); err != nil || !rep.OK() {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if v := metaVersion(t, dir); v != "2" {
		t.Fatalf("version after a writable Open: %q, want \"2\"", v)
	}
}

// TestNewLogIsNotAnUpgrade: a new log gets version 2 without the
// upgrade's log line, and reopening it logs nothing either.
func TestNewLogIsNotAnUpgrade(t *testing.T) {
	dir := t.TempDir()
	for range 2 {
		var logs bytes.Buffer
		db, err := wal.Open(dir, &wal.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		if strings.Contains(logs.String(), "upgraded") {
			t.Fatalf("opening a version 2 log logged %q", logs.String())
		}
	}
	if v := metaVersion(t, dir); v != "2" {
		t.Fatalf("version of a new log: %q", v)
	}
}

// TestUnknownVersionRefused: a log of a format version this binary does
// not know is refused at Open with ErrVersionMismatch, and left as it was.
func TestUnknownVersionRefused(t *testing.T) {
	db, dir := openFixture(t)
	db.Close()
	for _, v := range []string{"3", "0", "x", "02", "+2", " 2", "01"} {
		setMeta(t, dir, "version", v)
		if db, err := wal.Open(dir, nil); !errors.Is(err, wal.ErrVersionMismatch) {
			if err == nil {
				db.Close()
			}
			t.Fatalf("open a version %q log: %v, want wal.ErrVersionMismatch", v, err)
		}
		if got := metaVersion(t, dir); got != v {
			t.Fatalf("version after the refused Open: %q, want %q", got, v)
		}
	}
}

func metaVersion(t *testing.T, dir string) string {
	t.Helper()
	bdb, err := bolt.Open(filepath.Join(dir, wal.FileName), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	var v string
	bdb.View(func(tx *bolt.Tx) error {
		v = string(tx.Bucket([]byte("meta")).Get([]byte("version")))
		return nil
	})
	return v
}

func setMeta(t *testing.T, dir, key, value string) {
	t.Helper()
	bdb, err := bolt.Open(filepath.Join(dir, wal.FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	if err := bdb.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte(key), []byte(value))
	}); err != nil {
		t.Fatal(err)
	}
}
