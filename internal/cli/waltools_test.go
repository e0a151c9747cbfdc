package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/contractrefine/autonomy/internal/boltfile"
	"github.com/contractrefine/autonomy/internal/server"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// writeToolsWAL writes a log with one old, expired and consumed preflight
// (40 days ago) and one recent preflight, and closes it. It returns the dir.
func writeToolsWAL(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	db, err := wal.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	now := time.Now().UTC()
	for i, at := range []time.Time{now.Add(-40 * 24 * time.Hour), now.Add(-time.Hour)} {
		id := []string{"pf_old_preflight_0001", "pf_new_preflight_0001"}[i]
		b := preflight.Binding{PreflightID: id, AuditID: "au" + id[2:], Outcome: preflight.OutcomePass, ActorID: "user:example",
			ExpiresAt: at.Add(5 * time.Minute), Steps: []preflight.BoundStep{{ID: "s1", Kind: "tool.echo", ArgsDigest: "sha256:x"}}}
		if _, err := db.RecordPreflight(ctx, wal.PreflightRecord{Binding: b, Decision: json.RawMessage(`{"outcome":"pass"}`), Time: at}); err != nil {
			t.Fatal(err)
		}
		res, err := db.Consume(ctx, wal.ConsumeRequest{Binding: &b, Kind: "tool.echo", RequestID: "r", Time: at.Add(time.Second),
			Decision: func(wal.ConsumeResult) wal.FrameInput {
				return wal.FrameInput{Kind: wal.KindDecision, AuditID: b.AuditID, Time: at.Add(time.Second), Attrs: map[string]any{"outcome": "allow"}}
			}})
		if err != nil || res.Status != wal.Consumed {
			t.Fatalf("consume: %+v %v", res, err)
		}
	}
	return dir
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestWALStats(t *testing.T) {
	dir := writeToolsWAL(t)
	code, out, errs := runCLI(t, "wal", "stats", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	assertInOrder(t, "stats", out, []string{"wal " + filepath.Join(dir, wal.FileName), "frames", "6", "seq 1..6",
		"autonomy.decision", "2", "autonomy.preflight", "2", "autonomy.preflight_consumed", "2",
		"bindings", "2", "consumed markers", "2", "repair sessions", "0", "idempotency keys", "0", "bytes per frame"})

	code, out, errs = runCLI(t, "wal", "stats", "--data-dir", dir, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var st wal.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	if st.Frames != 6 || st.ByKind[wal.KindConsumed] != 2 || st.Bindings != 2 || st.FileBytes <= 0 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestWALExport(t *testing.T) {
	dir := writeToolsWAL(t)
	tests := map[string]struct {
		args []string
		code int
		seqs []uint64
		err  string
	}{
		"everything":             {seqs: []uint64{1, 2, 3, 4, 5, 6}},
		"preflights":             {args: []string{"--kind", "preflight"}, seqs: []uint64{1, 4}},
		"two kinds, full names":  {args: []string{"--kind", "autonomy.decision", "--kind", "autonomy.preflight_consumed"}, seqs: []uint64{2, 3, 5, 6}},
		"comma-separated kinds":  {args: []string{"--kind", "decision,preflight"}, seqs: []uint64{1, 3, 4, 6}},
		"since a duration":       {args: []string{"--since", "48h"}, seqs: []uint64{4, 5, 6}},
		"since an RFC 3339 time": {args: []string{"--since", time.Now().Add(-30 * 24 * time.Hour).UTC().Format(time.RFC3339)}, seqs: []uint64{4, 5, 6}},
		"after a seq":            {args: []string{"--after-seq", "4"}, seqs: []uint64{5, 6}},
		"unknown kind":           {args: []string{"--kind", "bogus"}, code: 1, err: `--kind "bogus" is not one of`},
		"outcome and approval":   {args: []string{"--kind", "outcome,autonomy.approval"}, seqs: []uint64{}},
		"bad since":              {args: []string{"--since", "yesterday"}, code: 1, err: `--since "yesterday"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, out, errs := runCLI(t, append([]string{"wal", "export", "--data-dir", dir}, tc.args...)...)
			if code != tc.code || !strings.Contains(errs, tc.err) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errs, tc.code, tc.err)
			}
			var seqs []uint64
			sc := bufio.NewScanner(strings.NewReader(out))
			for sc.Scan() {
				f, err := wal.DecodeFrame(sc.Bytes())
				if err != nil {
					t.Fatalf("line %q: %v", sc.Text(), err)
				}
				seqs = append(seqs, f.Seq)
			}
			if len(seqs) != len(tc.seqs) {
				t.Fatalf("exported seqs %v, want %v", seqs, tc.seqs)
			}
			for i := range seqs {
				if seqs[i] != tc.seqs[i] {
					t.Fatalf("exported seqs %v, want %v", seqs, tc.seqs)
				}
			}
		})
	}
}

func TestWALCompactThenVerify(t *testing.T) {
	dir := writeToolsWAL(t)
	code, out, errs := runCLI(t, "wal", "compact", "--data-dir", dir, "--retention", "720h")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	assertInOrder(t, "compact", out, []string{"retention 720h0m0s", "removed 3 frames (seq 1..3)",
		"removed 1 bindings, 1 consumed markers, 0 repair sessions, 0 idempotency keys", "kept from seq 4: younger than the cut-off"})

	code, out, errs = runCLI(t, "wal", "verify", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "3 frames (seq 4..6), hash chain intact") {
		t.Fatalf("verify after compact: exit %d, %s %s", code, out, errs)
	}
	code, out, _ = runCLI(t, "wal", "compact", "--data-dir", dir, "--retention", "720h")
	if code != 0 || !strings.Contains(out, "removed nothing") {
		t.Fatalf("second compact: exit %d, %s", code, out)
	}

	// The retention comes from the config file when --retention is absent.
	cfg := filepath.Join(t.TempDir(), "autonomy.yaml")
	if err := os.WriteFile(cfg, []byte("data_dir: "+dir+"\nwal:\n  retention: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runCLI(t, "wal", "compact", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("compact --config: exit %d: %s", code, errs)
	}
	var rep wal.CompactReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
	if rep.Frames != 3 || rep.StopReason != wal.StopEnd || rep.Preflights != 1 {
		t.Fatalf("compact with the config's 1m retention = %+v", rep)
	}
	if code, out, _ := runCLI(t, "wal", "verify", "--data-dir", dir); code != 0 || !strings.Contains(out, "hash chain intact") {
		t.Fatalf("verify of the emptied log: exit %d, %s", code, out)
	}

	if code, _, errs := runCLI(t, "wal", "compact", "--data-dir", dir, "--retention", "-1h"); code != 1 || !strings.Contains(errs, "--retention must be positive") {
		t.Fatalf("negative retention: exit %d, %s", code, errs)
	}
}

// TestWALCompactAfterTheAPI records preflights through the real API with a
// clock two days behind, then compacts with a one-day retention: the
// frames, bindings and the repair session's attempt count all go, because
// the API recorded the session_id and plan_hash compaction needs.
func TestWALCompactAfterTheAPI(t *testing.T) {
	dir := t.TempDir()
	url, stop := startPreflightServerWith(t, dir, server.Options{Now: func() time.Time { return time.Now().Add(-48 * time.Hour) }}, nil)
	file := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(file, []byte(planRepair), 0o600); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		if code, out, errs := runCLI(t, "preflight", "-f", file, "--server", url); code == exitPreflightError {
			t.Fatalf("attempt %d: exit %d: %s %s", attempt, code, out, errs)
		}
	}
	stop()
	code, out, errs := runCLI(t, "wal", "stats", "--data-dir", dir, "--json")
	var st wal.Stats
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Frames != 2 || st.Sessions != 1 || st.Bindings != 2 {
		t.Fatalf("stats before: exit %d, %s %s", code, out, errs)
	}
	if code, out, errs := runCLI(t, "wal", "compact", "--data-dir", dir, "--retention", "24h"); code != 0 ||
		!strings.Contains(out, "removed 2 bindings, 0 consumed markers, 1 repair sessions") {
		t.Fatalf("compact: exit %d, %s %s", code, out, errs)
	}
	code, out, _ = runCLI(t, "wal", "stats", "--data-dir", dir, "--json")
	st = wal.Stats{}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Frames != 0 || st.Sessions != 0 || st.Bindings != 0 || st.BaseSeq != 2 {
		t.Fatalf("stats after: %s", out)
	}
}

// TestWALToolsNeedALog: every command that reads the log offline refuses a
// directory without one, and leaves it without one: opening would create
// an empty log, and a mistyped path would then "verify".
func TestWALToolsNeedALog(t *testing.T) {
	for _, args := range [][]string{
		{"wal", "verify"}, {"wal", "stats"}, {"wal", "export"}, {"wal", "compact"}, {"audit", "au_0123456789abcdef"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "missing")
			code, out, errs := runCLI(t, append(args, "--data-dir", dir)...)
			if code != 1 || !strings.Contains(errs, "no write-ahead log in "+dir) {
				t.Errorf("exit %d, stdout %q, stderr %q; want 1 and no write-ahead log named", code, out, errs)
			}
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s exists after the command (%v)", dir, err)
			}
		})
	}
}

// TestGroupCommandsRefuseTypos: a group command run alone or with an
// unknown subcommand fails, so a typo in a scheduled "wal verify" does not
// pass as success.
func TestGroupCommandsRefuseTypos(t *testing.T) {
	for _, args := range [][]string{{"wal", "verfy"}, {"wal"}, {"demo", "contract-refin"}, {"demo"}} {
		if code, _, errs := runCLI(t, args...); code == 0 || !strings.Contains(errs, "autonomy") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
}

// TestWALVerifyNamesARecordThatDisagrees: a binding record edited in a log
// whose frames all hold is reported as a record that disagrees with the
// chain, not as a break after the frames before it.
func TestWALVerifyNamesARecordThatDisagrees(t *testing.T) {
	dir := writeToolsWAL(t)
	bdb, err := bolt.Open(filepath.Join(dir, wal.FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("preflights"))
		k := []byte("pf_new_preflight_0001")
		return b.Put(k, bytes.Replace(bytes.Clone(b.Get(k)), []byte("pass"), []byte("deny"), 1))
	})
	bdb.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "wal", "verify", "--data-dir", dir)
	if code != 1 || !strings.Contains(out, "FAILED at seq 4:") || !strings.Contains(out, "the hash chain of its 6 frames holds; an index record disagrees with it") {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
}

// TestWALCompactSaysItUpgraded: compact opens the log for writing, which
// upgrades an older format; it says so on stderr, as serve logs it, since
// an older binary then refuses the file.
func TestWALCompactSaysItUpgraded(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "wal", "testdata", "v1-9a65390.db"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, wal.FileName), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, "wal", "compact", "--data-dir", dir, "--retention", "720h")
	if code != 0 || !strings.Contains(errs, "wal format upgraded") {
		t.Fatalf("exit %d, stderr %q; want the upgrade said", code, errs)
	}
	if code, _, errs = runCLI(t, "wal", "compact", "--data-dir", dir, "--retention", "720h"); code != 0 || strings.Contains(errs, "upgraded") {
		t.Fatalf("second compact: exit %d, stderr %q; want no upgrade", code, errs)
	}
}

// TestWALCompactRefusesAnEmptiedLog: a wal.db of zero bytes has lost its
// log; compact refuses it as the read-only commands do, rather than start
// a new log on it, after which verify would report an intact chain.
func TestWALCompactRefusesAnEmptiedLog(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, wal.FileName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, "wal", "compact", "--data-dir", dir, "--retention", "720h")
	if code != 1 || !strings.Contains(errs, "the file is empty (0 bytes) and holds no log") {
		t.Fatalf("compact of an emptied log: exit %d, stderr %q", code, errs)
	}
	if st, err := os.Stat(filepath.Join(dir, wal.FileName)); err != nil || st.Size() != 0 {
		t.Fatalf("the emptied log after compact: %v, %v; want it left as it was", st, err)
	}
	if code, _, errs := runCLI(t, "wal", "verify", "--data-dir", dir); code != 1 || !strings.Contains(errs, "holds no log") {
		t.Fatalf("verify after compact: exit %d, stderr %q; want the empty file still reported", code, errs)
	}
}

// TestWALVerifyChecksThePages: verify fails, exit 1, on a log whose frames
// all hold but whose pages do not (a page in use that the freelist also
// lists, which a later commit would write over), and on a log whose
// freelist is damaged, which serve refuses to open: it never passes a log
// the service would not run on.
func TestWALVerifyChecksThePages(t *testing.T) {
	dir := writeToolsWAL(t)
	path := filepath.Join(dir, wal.FileName)
	m, err := boltfile.ReadMeta(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := boltfile.ListFree(path, m.Root); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "wal", "verify", "--data-dir", dir)
	if code != 1 || !strings.Contains(out, "wal verify: FAILED: the file's pages are inconsistent: page ") ||
		!strings.Contains(out, "the hash chain of its 6 frames holds") {
		t.Fatalf("a page listed free and in use: exit %d: %s %s", code, out, errs)
	}

	dir = writeToolsWAL(t)
	path = filepath.Join(dir, wal.FileName)
	if m, err = boltfile.ReadMeta(path); err != nil {
		t.Fatal(err)
	}
	if err := boltfile.Overwrite(path, m.Freelist, 0xff); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runCLI(t, "wal", "verify", "--data-dir", dir); code != 1 || !strings.Contains(errs, "is damaged: invalid freelist page") {
		t.Fatalf("a damaged freelist: exit %d: %s %s", code, out, errs)
	}
}
