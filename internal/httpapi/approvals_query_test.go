package httpapi

import (
	"encoding/base64"
	"testing"

	"github.com/contractrefine/autonomy/wal"
)

func TestApprovalQueryOf(t *testing.T) {
	good := base64.RawURLEncoding.EncodeToString([]byte(wal.ApprovalKey("pf_x", "s1")))
	for _, tc := range []struct {
		raw    string
		ok     bool
		after  string
		limit  int
		reason string
	}{
		{raw: "", ok: true, limit: DefaultApprovalPage},
		{raw: "state=decided&limit=7&cursor=" + good, ok: true, after: wal.ApprovalKey("pf_x", "s1"), limit: 7},
		{raw: "cursor=zzz", reason: "decodes to bytes that name no approval"},
		{raw: "cursor=" + base64.RawURLEncoding.EncodeToString([]byte("pf_x\x00")), reason: "no step"},
		{raw: "cursor=" + base64.RawURLEncoding.EncodeToString([]byte("\x00s1")), reason: "no preflight id"},
		{raw: "cursor=!!", reason: "not base64"},
		{raw: "cursor=", reason: "empty"},
		{raw: "state=foo", reason: "unknown state"},
		{raw: "limit=0", reason: "limit below 1"},
		{raw: "state=pending&state=pending", reason: "given twice"},
		{raw: "page=2", reason: "unknown parameter"},
	} {
		q, msg := approvalQueryOf(tc.raw)
		if (msg == "") != tc.ok {
			t.Errorf("%q: message %q, want ok=%v (%s)", tc.raw, msg, tc.ok, tc.reason)
			continue
		}
		if tc.ok && (q.after != tc.after || q.limit != tc.limit) {
			t.Errorf("%q: after %q limit %d, want %q %d", tc.raw, q.after, q.limit, tc.after, tc.limit)
		}
	}
}
