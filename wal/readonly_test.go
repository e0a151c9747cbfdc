package wal

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadOnlyOpen: a log opened read-only reads, verifies and exports as
// a writable one does, refuses writes, and leaves the file as it was; a
// directory without a log is refused, nothing created. When the tests do
// not run as root, a file the user may only read opens too.
func TestReadOnlyOpen(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AppendDecision(context.Background(), FrameInput{Kind: KindDecision, AuditID: "au_ro", Time: time.Now(),
		Attrs: map[string]any{"outcome": "deny"}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	path := filepath.Join(dir, FileName)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		if err := os.Chmod(path, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := Open(dir, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := ro.Verify(context.Background()); err != nil || !rep.OK() || rep.Frames != 1 {
		t.Fatalf("verify read-only: %+v, %v", rep, err)
	}
	var out bytes.Buffer
	if n, err := ro.Export(context.Background(), &out, ExportFilter{}); err != nil || n != 1 {
		t.Fatalf("export read-only: %d, %v", n, err)
	}
	if _, err := ro.AppendDecision(context.Background(), FrameInput{Kind: KindDecision, AuditID: "au_ro", Time: time.Now(),
		Attrs: map[string]any{"outcome": "deny"}}); err == nil {
		t.Fatal("a write to a log opened read-only succeeded")
	}
	ro.Close()
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("opening read-only changed the file")
	}
	empty := filepath.Join(t.TempDir(), "none")
	if _, err := Open(empty, &Options{ReadOnly: true}); err == nil {
		t.Fatal("a read-only open of a directory without a log succeeded")
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Fatalf("a read-only open created %s: %v", empty, err)
	}
	// A file truncated to zero holds no log: said so, not bbolt's failed
	// attempt to write a new one into a file opened for reading.
	zero := t.TempDir()
	if err := os.WriteFile(filepath.Join(zero, FileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(zero, &Options{ReadOnly: true}); !errors.Is(err, ErrEmptyFile) {
		t.Fatalf("a read-only open of an empty file: %v, want ErrEmptyFile", err)
	}
	if st, err := os.Stat(filepath.Join(zero, FileName)); err != nil || st.Size() != 0 {
		t.Fatalf("the empty file after a read-only open: %v, %v", st, err)
	}
	// A writable open (serve) starts a new log on it, and says the old
	// one is gone; a new data directory says nothing.
	for name, dir := range map[string]string{"emptied": zero, "new": t.TempDir()} {
		var logs bytes.Buffer
		db, err := Open(dir, &Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("%s: a writable open: %v", name, err)
		}
		db.Close()
		said := strings.Contains(logs.String(), "the file was empty (0 bytes)")
		if said != (name == "emptied") {
			t.Errorf("%s: a writable open logged:\n%s", name, logs.String())
		}
	}
}
