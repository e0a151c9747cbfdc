package e2e

import (
	"net/http"
	"testing"
)

// TestApprovalsModeDisabled: mode disabled gates nothing (README.md: no
// preflights, the header ignored, no ladder), so no step waits for an
// approval at the gate: a call on a step nobody approved passes with
// policy: allowed and consumes nothing. The approvals API still records a
// decision durably, and once the gate enforces again that approval lets
// its step run once.
func TestApprovalsModeDisabled(t *testing.T) {
	t.Parallel()
	s := apServe(t, "enforce")
	d := apPreflight(t, s, apRequest("disabled", apKind))
	if v := apCheck(t, s, d, apKind, "req-enforced"); v.DenyReason != "approval: pending" {
		t.Fatalf("enforce, not approved: %+v, want approval: pending", v)
	}
	s.Stop()

	o := s.opts
	o.Mode, o.DataDir = "disabled", s.DataDir
	dis := &cbServer{Server: StartServer(t, o)}
	dis.WaitVerified()
	dis.check = dis.Authz(t)
	if status, code, _ := apDo(t, dis, "POST", "/v1/preflight", "", string(apRequest("disabled-2", apKind))); status != http.StatusServiceUnavailable || code != "preflight-disabled" {
		t.Errorf("preflight in disabled mode: %d %s, want 503 preflight-disabled", status, code)
	}
	for _, rq := range []string{"req-disabled-1", "req-disabled-2"} {
		if v := apCheck(t, dis, d, apKind, rq); v.HTTPStatus != 200 || v.AdvisoryReason != "" {
			t.Fatalf("disabled, not approved (%s): %+v, want allowed with no ladder", rq, v)
		}
	}
	frames, _ := apFrames(t, dis, d.AuditID, "?include=approval")
	for _, f := range frames {
		if f.Kind == "autonomy.decision" && f.Attrs["request_id"] == "req-disabled-1" {
			t.Errorf("a disabled-mode call joined the preflight's audit id: %v", f.Attrs)
		}
	}
	if status, code := apDecide(t, dis, d, apAliceToken, "approve"); status != http.StatusOK {
		t.Fatalf("approve in disabled mode: %d %s, want 200", status, code)
	}
	dis.Stop()

	o.Mode = "enforce"
	back := &cbServer{Server: StartServer(t, o)}
	back.WaitVerified()
	back.check = back.Authz(t)
	frames, _ = apFrames(t, back, d.AuditID, "?include=approval")
	approvals := 0
	for _, f := range frames {
		if f.Kind == "autonomy.approval" && f.Attrs["decision"] == "approve" && f.Attrs["approver"] == "alice" {
			approvals++
		}
	}
	if approvals != 1 {
		t.Errorf("approval frames after the restart: %v, want alice's approval", frames)
	}
	if v := apCheck(t, back, d, apKind, "req-back-1"); v.HTTPStatus != 200 {
		t.Fatalf("enforce again, approved: %+v, want allowed (the disabled-mode calls consumed nothing)", v)
	}
	if v := apCheck(t, back, d, apKind, "req-back-2"); v.DenyReason != "contract: preflight_replay" {
		t.Fatalf("second call: %+v, want contract: preflight_replay", v)
	}
}
