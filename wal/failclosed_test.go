package wal

// The log under faults that happen to real files: the file removed or
// replaced while open, and frames removed, reordered or cut off behind the
// log's back.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestFileGoneFailsEveryWrite: once the file at the log's path is not the
// one open, every write fails with ErrFileGone, not just the first; and a
// consume that failed is not on disk, so it can never count as used.
func TestFileGoneFailsEveryWrite(t *testing.T) {
	faults := map[string]func(t *testing.T, path string){
		"removed": func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		},
		"replaced by a copy": func(t *testing.T, path string) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tmp := path + ".copy"
			if err := os.WriteFile(tmp, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, fault := range faults {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			db, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			b := testBinding("pf_gone_aaaaaaaaaaaa", "tool.echo")
			record(t, db, b)
			fault(t, db.Path())

			for i := range 3 {
				if _, err := db.AppendDecision(ctx, FrameInput{Kind: KindDecision, Time: t0}); !errors.Is(err, ErrFileGone) {
					t.Fatalf("append %d after the fault: %v", i, err)
				}
			}
			if _, err := db.Consume(ctx, ConsumeRequest{Binding: &b, Kind: "tool.echo", RequestID: "r1", Time: t0}); !errors.Is(err, ErrFileGone) {
				t.Fatalf("consume after the fault: %v", err)
			}
			if err := db.Probe(ctx); !errors.Is(err, ErrFileGone) {
				t.Fatalf("probe after the fault: %v", err)
			}
			db.Close()

			// What is at the path now is what a restart finds.
			again, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			got, err := again.Binding(ctx, b.PreflightID)
			switch name {
			case "removed":
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("binding in a new log: %v", err)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				res, err := again.Peek(ctx, ConsumeRequest{Binding: &got, Kind: "tool.echo", RequestID: "r2", Time: t0})
				if err != nil || res.Status != Consumed {
					t.Fatalf("the failed consume left a mark: %v %v", res.Status, err)
				}
				if rep, err := again.Verify(ctx); err != nil || !rep.OK() || rep.Frames != 1 {
					t.Fatalf("verify %+v %v", rep, err)
				}
			}
		})
	}
}

// editFrames changes the frames bucket of a closed log directly.
func editFrames(t *testing.T, dir string, fn func(frames, meta *bolt.Bucket) error) {
	t.Helper()
	bdb, err := bolt.Open(filepath.Join(dir, FileName), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	if err := bdb.Update(func(tx *bolt.Tx) error {
		return fn(tx.Bucket([]byte("frames")), tx.Bucket([]byte("meta")))
	}); err != nil {
		t.Fatal(err)
	}
}

func frameKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// TestVerifyNamesStructuralDamage: frames removed, swapped or cut off
// behind the log's back are each named at the first seq that is wrong.
func TestVerifyNamesStructuralDamage(t *testing.T) {
	cases := map[string]struct {
		edit    func(frames, meta *bolt.Bucket) error
		badSeq  uint64
		problem string
	}{
		"frame 3 removed": {
			edit:   func(f, _ *bolt.Bucket) error { return f.Delete(frameKey(3)) },
			badSeq: 4, problem: "seq 4 follows 2",
		},
		"frames 2 and 3 swapped": {
			edit: func(f, _ *bolt.Bucket) error {
				two, three := append([]byte(nil), f.Get(frameKey(2))...), append([]byte(nil), f.Get(frameKey(3))...)
				if err := f.Put(frameKey(2), three); err != nil {
					return err
				}
				return f.Put(frameKey(3), two)
			},
			badSeq: 2, problem: "frame says seq 3 under key 2",
		},
		"last frame cut off": {
			edit:   func(f, _ *bolt.Bucket) error { return f.Delete(frameKey(5)) },
			badSeq: 5, problem: "head records seq 5 but the log ends at 4",
		},
		// The frame past the head is named, not a seq the log never had.
		"head set back a frame": {
			edit: func(f, m *bolt.Bucket) error {
				fr, err := DecodeFrame(f.Get(frameKey(4)))
				if err != nil {
					return err
				}
				head, err := json.Marshal(chainPoint{Seq: 4, Hash: fr.Hash})
				if err != nil {
					return err
				}
				return m.Put(keyHead, head)
			},
			badSeq: 5, problem: "head records seq 4 but the log ends at 5",
		},
		"frame 4 replaced by a re-hashed forgery": {
			// A forger who recomputes the frame's own hash still breaks the
			// link from frame 5.
			edit: func(f, _ *bolt.Bucket) error {
				fr, err := DecodeFrame(f.Get(frameKey(4)))
				if err != nil {
					return err
				}
				fr.Attrs = []byte(`{"outcome":"allow"}`)
				fr.Hash = fr.computeHash()
				b, err := json.Marshal(&fr)
				if err != nil {
					return err
				}
				return f.Put(frameKey(4), b)
			},
			badSeq: 5, problem: "prev_hash does not match",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			db, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				if _, err := db.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: "au_x", Time: t0,
					Attrs: map[string]any{"outcome": "deny", "n": i}}); err != nil {
					t.Fatal(err)
				}
			}
			db.Close()
			editFrames(t, dir, tc.edit)
			db, err = Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			rep, err := db.Verify(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() || rep.BadSeq != tc.badSeq || !strings.Contains(rep.Problem, tc.problem) {
				t.Fatalf("verify = %+v, want bad seq %d (%s)", rep, tc.badSeq, tc.problem)
			}
		})
	}
}

// TestTruncatedFileIsAnErrorNotACrash cuts a closed log at every page from
// its end down to nothing. Opening, verifying, reading and writing each
// cut may fail, naming the damage, but never crash or hang the process:
// bbolt's panics and faults on a damaged file become ErrCorrupt (open.go).
func TestTruncatedFileIsAnErrorNotACrash(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		record(t, db, testBinding(fmt.Sprintf("pf_trunc%04d", i), "tool.echo"))
	}
	path := db.Path()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	failed := 0
	for size := len(whole) - page; size >= 0; size -= page {
		cut := filepath.Join(t.TempDir(), FileName)
		if err := os.WriteFile(cut, whole[:size], 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := Open(filepath.Dir(cut), nil)
		if err != nil {
			failed++
			continue
		}
		rep, verr := db.Verify(context.Background())
		_, berr := db.Binding(context.Background(), "pf_trunc0000")
		_, werr := db.RecordPreflight(context.Background(), PreflightRecord{Binding: testBinding("pf_after", "tool.echo"),
			Decision: json.RawMessage(`{"outcome":"pass"}`), Time: t0})
		if verr != nil || !rep.OK() || berr != nil || werr != nil {
			failed++
		}
		db.Close()
	}
	if failed == 0 {
		t.Fatal("no cut of the file was found damaged")
	}
}
