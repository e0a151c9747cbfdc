package wal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
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

// fixtureDir is a data directory holding a copy of the fixture, as written.
func fixtureDir(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "v1-9a65390.db"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, wal.FileName), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openFixture opens a copy of the fixture writable, which upgrades it.
func openFixture(t *testing.T) (*wal.DB, string) {
	t.Helper()
	dir := fixtureDir(t)
	db, err := wal.Open(dir, nil)
	if err != nil {
		t.Fatalf("open a log written before format versions: %v", err)
	}
	return db, dir
}

// TestLogWrittenBeforeVersionsServes: a log written by the binary of
// 9a65390 opens (and gets version 3, its marker moved into the audit
// index), verifies, and serves its binding,
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
	verifiedAtCurrentVersion(t, db, dir)
}

// TestVersion1LogUpgraded: a version 1 log opened read-only stays as it
// was; opened writable it becomes version 3, and a preflight it then
// records (packed in the form version 1 does not read) verifies beside
// the DEFLATE-packed frames of version 1.
func TestVersion1LogUpgraded(t *testing.T) {
	dir := fixtureDir(t)
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
	db, err := wal.Open(dir, &wal.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
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
	verifiedAtCurrentVersion(t, db, dir)
}

// verifiedAtCurrentVersion verifies the log db, open on dir, closes it, and
// checks that the file then records the current format version and keeps
// its consumed markers in the audit index.
func verifiedAtCurrentVersion(t *testing.T, db *wal.DB, dir string) {
	t.Helper()
	if rep, err := db.Verify(context.Background()); err != nil || !rep.OK() {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if v := metaVersion(t, dir); v != strconv.Itoa(wal.FormatVersion) {
		t.Fatalf("version after a writable Open: %q, want %d", v, wal.FormatVersion)
	}
	if hasBucket(t, dir, "consumed") {
		t.Fatal("the consumed bucket is still there after a writable Open")
	}
}

// TestNewLogIsNotAnUpgrade: a new log gets version 3 without the
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
			t.Fatalf("opening a version 3 log logged %q", logs.String())
		}
	}
	if v := metaVersion(t, dir); v != "3" {
		t.Fatalf("version of a new log: %q", v)
	}
	if hasBucket(t, dir, "consumed") {
		t.Fatal("a new log has a consumed bucket")
	}
}

// TestUnknownVersionRefused: a log of a format version this binary does
// not know is refused at Open with ErrVersionMismatch, and left as it was.
func TestUnknownVersionRefused(t *testing.T) {
	db, dir := openFixture(t)
	db.Close()
	for _, v := range []string{"4", "0", "x", "02", "+3", " 3", "03"} {
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

// TestVersion2LogMarkersMoved: a version 2 log serves its consumed markers
// from their bucket when opened read-only, and keeps serving them once a
// writable Open moved them into the audit index: the consumed step is
// still spent, and a marker of a preflight no longer recorded is dropped.
func TestVersion2LogMarkersMoved(t *testing.T) {
	db, dir := openFixture(t)
	b, err := db.Binding(context.Background(), pfFixture)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	// Back to the version 2 layout: the marker in its bucket, and one more
	// of a preflight the log does not hold.
	bdb, err := bolt.Open(filepath.Join(dir, wal.FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error {
		audit := tx.Bucket([]byte("audit"))
		consumed, err := tx.CreateBucket([]byte("consumed"))
		if err != nil {
			return err
		}
		k := append([]byte(auFixture+"\x01"+pfFixture), 0, 0, 0)
		if err := consumed.Put(append([]byte(pfFixture), 0, 0, 0), bytes.Clone(audit.Get(k))); err != nil {
			return err
		}
		if err := consumed.Put(append([]byte("pf_gone"), 0, 0, 0), []byte(`{"request_id":"r","seq":1}`)); err != nil {
			return err
		}
		if err := audit.Delete(k); err != nil {
			return err
		}
		return tx.Bucket([]byte("meta")).Put([]byte("version"), []byte("2"))
	}); err != nil {
		t.Fatal(err)
	}
	bdb.Close()

	ctx := context.Background()
	call, err := canon.Digest(map[string]any{"msg": "hi"})
	if err != nil {
		t.Fatal(err)
	}
	repeat := wal.ConsumeRequest{Binding: &b, Kind: "tool.echo", RequestID: "req-fixture-1", CallDigest: call, Time: time.Now()}
	ro, err := wal.Open(dir, &wal.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open of a version 2 log: %v", err)
	}
	if res, err := ro.Peek(ctx, repeat); err != nil || res.Status != wal.Repeated {
		t.Fatalf("read-only peek of the consumed step: %+v, %v; want repeated", res, err)
	}
	if st, err := ro.Stats(ctx); err != nil || st.ConsumedMarkers != 2 || st.FormatVersion != 2 {
		t.Fatalf("read-only stats: %d markers, version %d, %v; want 2 and 2", st.ConsumedMarkers, st.FormatVersion, err)
	}
	ro.Close()

	var logs bytes.Buffer
	db, err = wal.Open(dir, &wal.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "consumed_markers_moved=1 consumed_markers_dropped=1") {
		t.Errorf("the upgrade logged %q, want one marker moved and one dropped", logs.String())
	}
	if res, err := db.Peek(ctx, repeat); err != nil || res.Status != wal.Repeated {
		t.Fatalf("peek after the upgrade: %+v, %v; want repeated", res, err)
	}
	if st, err := db.Stats(ctx); err != nil || st.ConsumedMarkers != 1 || st.FormatVersion != wal.FormatVersion {
		t.Fatalf("stats after the upgrade: %d markers, version %d, %v; want 1 and %d", st.ConsumedMarkers, st.FormatVersion, err, wal.FormatVersion)
	}
	verifiedAtCurrentVersion(t, db, dir)
}

// TestMarkerLayoutMustMatchVersion: a log whose consumed bucket says
// another format than its version key is refused as corrupt, read-only or
// writable, rather than read with its markers missing.
func TestMarkerLayoutMustMatchVersion(t *testing.T) {
	for _, tc := range []struct {
		version  string
		consumed bool
	}{{"3", true}, {"2", false}, {"1", false}} {
		db, dir := openFixture(t)
		db.Close()
		bdb, err := bolt.Open(filepath.Join(dir, wal.FileName), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := bdb.Update(func(tx *bolt.Tx) error {
			if tc.consumed {
				if _, err := tx.CreateBucket([]byte("consumed")); err != nil {
					return err
				}
			}
			return tx.Bucket([]byte("meta")).Put([]byte("version"), []byte(tc.version))
		}); err != nil {
			t.Fatal(err)
		}
		bdb.Close()
		for _, ro := range []bool{true, false} {
			if db, err := wal.Open(dir, &wal.Options{ReadOnly: ro}); !errors.Is(err, wal.ErrCorrupt) {
				if err == nil {
					db.Close()
				}
				t.Errorf("version %s, consumed bucket %v, read-only %v: %v; want wal.ErrCorrupt", tc.version, tc.consumed, ro, err)
			}
		}
	}
}

// viewFile runs fn in a read-only transaction of the log file in dir,
// opened with bbolt alone.
func viewFile(t *testing.T, dir string, fn func(*bolt.Tx)) {
	t.Helper()
	bdb, err := bolt.Open(filepath.Join(dir, wal.FileName), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	bdb.View(func(tx *bolt.Tx) error { fn(tx); return nil })
}

func hasBucket(t *testing.T, dir, name string) (has bool) {
	t.Helper()
	viewFile(t, dir, func(tx *bolt.Tx) { has = tx.Bucket([]byte(name)) != nil })
	return has
}

func metaVersion(t *testing.T, dir string) (v string) {
	t.Helper()
	viewFile(t, dir, func(tx *bolt.Tx) { v = string(tx.Bucket([]byte("meta")).Get([]byte("version"))) })
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
