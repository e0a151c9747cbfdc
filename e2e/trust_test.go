package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc/codes"

	"github.com/contractrefine/autonomy/wal"
)

// TestServeRefusesATamperedLog is the attack on a stopped service: delete
// the consumed marker of a spent step (wal verify then says "it could be
// consumed again"), or move a binding record's expiry a year later, and
// start again. Unchecked, the service would start and allow the spent step
// a second time under a new request id; it verifies the log at open: /readyz
// is 503, the step is refused with 503 (never allowed), one log line and
// the metrics name the seq, and the log can still be read over the API
// and, once stopped, verified and exported with the CLI.
func TestServeRefusesATamperedLog(t *testing.T) {
	tests := map[string]func(t *testing.T, btx *bolt.Tx, preflightID, auditID string){
		"consumed marker deleted": func(t *testing.T, btx *bolt.Tx, preflightID, auditID string) {
			// In the audit index, after its audit id's entries (wal/doc.go).
			key := append([]byte(auditID+"\x01"+preflightID), 0, 0, 0)
			if btx.Bucket([]byte("audit")).Get(key) == nil {
				t.Fatalf("no consumed marker for %s", preflightID)
			}
			if err := btx.Bucket([]byte("audit")).Delete(key); err != nil {
				t.Fatal(err)
			}
		},
		"binding record a year later": func(t *testing.T, btx *bolt.Tx, preflightID, _ string) {
			b := btx.Bucket([]byte("preflights"))
			v := bytes.Clone(b.Get([]byte(preflightID)))
			// The record (wal/doc.go): seq, version, four strings, then the
			// expiry's seconds as a varint. A year more changes its bytes
			// but not their count for any time this century.
			at := 9
			for range 4 {
				n, w := binary.Uvarint(v[at:])
				at += w + int(n)
			}
			sec, w := binary.Varint(v[at:])
			enc := binary.AppendVarint(nil, sec+365*24*3600)
			if len(enc) != w {
				t.Fatalf("varint width changed: %d -> %d", w, len(enc))
			}
			copy(v[at:], enc)
			if err := b.Put([]byte(preflightID), v); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, tamper := range tests {
		t.Run(name, func(t *testing.T) {
			s := StartServer(t, ServeOptions{Mode: "enforce"})
			authz := s.Authz(t)
			d := passPreflight(t, s, "session:trust")
			wantAllow(t, checkEcho(t, authz, d.PreflightID, "req-1"), d.AuditID)
			if code := s.Stop(); code != 0 {
				t.Fatalf("SIGTERM: exit code %d", code)
			}
			path := filepath.Join(s.DataDir, wal.FileName)
			bdb, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := bdb.Update(func(btx *bolt.Tx) error { tamper(t, btx, d.PreflightID, d.AuditID); return nil }); err != nil {
				t.Fatal(err)
			}
			bdb.Close()

			s = s.Restart()
			if resp, err := http.Get(s.URL("/readyz")); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("/readyz on a log that fails verification: %v %v, want 503", resp.StatusCode, err)
			} else {
				resp.Body.Close()
			}
			wantDeny(t, checkEcho(t, s.Authz(t), d.PreflightID, "req-2"), codes.PermissionDenied, 503, "contract: verifier_unavailable")
			lines := s.LogLines("wal failed verification; nothing is decided from it until it is repaired")
			if len(lines) != 1 || lines[0]["seq"] == nil || lines[0]["seq"].(float64) == 0 {
				t.Fatalf("log lines naming the seq: %v\n%s", lines, s.Logs())
			}
			seq := uint64(lines[0]["seq"].(float64))
			// That one line, not a compaction error beside it: compaction
			// waits for a verified log.
			if n := len(s.LogLines("wal compaction failed")); n != 0 {
				t.Errorf("%d \"wal compaction failed\" lines on a log that failed verification", n)
			}
			metrics := getText(t, s.URL("/metrics"))
			for _, want := range []string{"autonomy_wal_verified 0", fmt.Sprintf("autonomy_wal_verify_failed_seq %d", seq)} {
				if !strings.Contains(metrics, want+"\n") {
					t.Errorf("/metrics lacks %q", want)
				}
			}
			if frames := auditFrames(t, s, d.AuditID); len(frames) == 0 {
				t.Errorf("the audit trail cannot be read")
			}
			if code := s.Stop(); code != 0 {
				t.Fatalf("SIGTERM: exit code %d", code)
			}
			res := RunAutonomy(t, "wal", "verify", "--data-dir", s.DataDir)
			if res.Code != 1 || !strings.Contains(res.Stdout, fmt.Sprintf("FAILED at seq %d", seq)) {
				t.Errorf("wal verify: exit %d, want 1 naming seq %d\n%s%s", res.Code, seq, res.Stdout, res.Stderr)
			}
			if res := RunAutonomy(t, "wal", "export", "--data-dir", s.DataDir); res.Code != 0 || !strings.Contains(res.Stdout, d.AuditID) {
				t.Errorf("wal export: exit %d\n%s", res.Code, res.Stderr)
			}
		})
	}
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
