package preflight

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/preflight/envelope"
)

// TestApprovalsRequired: a capability's approval block and an envelope's
// approvalPolicy each put a step in approvals_required, with the
// authorities that apply and expiry min(binding, timeout).
func TestApprovalsRequired(t *testing.T) {
	bindingExpiry := testNow.Add(5 * time.Minute)
	capApproval := &ApprovalSpec{Required: true, Authorities: []string{"role:cap"}, Timeout: Duration(2 * time.Minute)}
	always := envelope.ApprovalPolicy{Mode: envelope.ApprovalModeAlways, RequiredFor: []string{"financial-high-impact"},
		TimeoutSeconds: 60, AuthorityRefs: []string{"role:env"}}
	tests := map[string]struct {
		capability  Capability
		policy      *envelope.ApprovalPolicy
		authorities []string // nil: no approval
		expires     time.Time
	}{
		"none":                    {capability: Capability{Zones: []string{"*"}}},
		"capability":              {capability: Capability{Approval: capApproval}, authorities: []string{"role:cap"}, expires: testNow.Add(2 * time.Minute)},
		"capability not required": {capability: Capability{Approval: &ApprovalSpec{Authorities: []string{"role:cap"}}}},
		"capability, no timeout": {capability: Capability{Approval: &ApprovalSpec{Required: true, Authorities: []string{"role:cap"}}},
			authorities: []string{"role:cap"}, expires: bindingExpiry},
		"capability timeout past the binding": {capability: Capability{Approval: &ApprovalSpec{Required: true,
			Authorities: []string{"role:cap"}, Timeout: Duration(time.Hour)}}, authorities: []string{"role:cap"}, expires: bindingExpiry},
		"envelope class": {capability: Capability{PermissionClass: "financial-high-impact"}, policy: &always,
			authorities: []string{"role:env"}, expires: testNow.Add(time.Minute)},
		"envelope, other class": {capability: Capability{PermissionClass: "read"}, policy: &always},
		"envelope policy-driven": {capability: Capability{PermissionClass: "financial-high-impact"},
			policy: &envelope.ApprovalPolicy{Mode: "policy-driven", RequiredFor: []string{"financial-high-impact"}, AuthorityRefs: []string{"role:env"}}},
		"both: the capability's authorities, the shorter timeout": {capability: Capability{PermissionClass: "financial-high-impact",
			Approval: capApproval}, policy: &always, authorities: []string{"role:cap"}, expires: testNow.Add(time.Minute)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gov := &Governance{Capabilities: map[string]Capability{"pay.send": tc.capability}}
			req := &Request{Plan: Plan{Steps: []Step{{ID: "s1", Kind: "pay.send", Args: map[string]any{"n": json.Number("1")}}}}}
			var env *envelope.Envelope
			if tc.policy != nil {
				env = &envelope.Envelope{Approval: *tc.policy}
			}
			got := approvalsRequired(req, gov, env, testNow, bindingExpiry)
			if tc.authorities == nil {
				if len(got) != 0 {
					t.Fatalf("approvals_required = %+v, want none", got)
				}
				return
			}
			want, _ := stepArgsDigest(&req.Plan.Steps[0])
			if len(got) != 1 || got[0].StepID != "s1" || got[0].ToolKind != "pay.send" || got[0].ArgsDigest != want ||
				strings.Join(got[0].Authorities, ",") != strings.Join(tc.authorities, ",") ||
				got[0].ExpiresAt != tc.expires.UTC().Format(time.RFC3339Nano) {
				t.Fatalf("approvals_required = %+v, want s1 by %v until %s", got, tc.authorities, tc.expires)
			}
		})
	}
}

func TestApprovalSpecValidate(t *testing.T) {
	tests := map[string]struct {
		spec *ApprovalSpec
		ok   bool
	}{
		"nil":                     {nil, true},
		"required with authority": {&ApprovalSpec{Required: true, Authorities: []string{"role:a"}}, true},
		"not required, none":      {&ApprovalSpec{}, true},
		"required, no authority":  {&ApprovalSpec{Required: true}, false},
		"empty authority":         {&ApprovalSpec{Required: true, Authorities: []string{""}}, false},
		"authority twice":         {&ApprovalSpec{Required: true, Authorities: []string{"role:a", "role:a"}}, false},
		// The tokens file refuses such a role, so no token could approve.
		"authority with white space": {&ApprovalSpec{Required: true, Authorities: []string{"role:a", " r"}}, false},
	}
	for name, tc := range tests {
		if err := tc.spec.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok %v", name, err, tc.ok)
		}
	}
}

func TestDecodeApprovalBody(t *testing.T) {
	tests := map[string]struct {
		body, path string // path "-": accepted
		want       ApprovalBody
	}{
		"approve":             {`{"decision":"approve"}`, "-", ApprovalBody{Decision: "approve"}},
		"reject with comment": {`{"decision":"reject","comment":"no invoice"}`, "-", ApprovalBody{Decision: "reject", Comment: "no invoice"}},
		"null comment":        {`{"comment":null,"decision":"approve"}`, "-", ApprovalBody{Decision: "approve"}},
		"empty":               {``, "", ApprovalBody{}},
		"not an object":       {`["approve"]`, "", ApprovalBody{}},
		"no decision":         {`{"comment":"x"}`, "/decision", ApprovalBody{}},
		"decision other":      {`{"decision":"Approve"}`, "/decision", ApprovalBody{}},
		"decision null":       {`{"decision":null}`, "/decision", ApprovalBody{}},
		"decision a bool":     {`{"decision":true}`, "/decision", ApprovalBody{}},
		"unknown member":      {`{"decision":"approve","approver":"me"}`, "/approver", ApprovalBody{}},
		"duplicate decision":  {`{"decision":"reject","decision":"approve"}`, "/decision", ApprovalBody{}},
		"case twin":           {`{"decision":"approve","Decision":"reject"}`, "/Decision", ApprovalBody{}},
		"comment an object":   {`{"decision":"approve","comment":{}}`, "/comment", ApprovalBody{}},
		"comment too long":    {`{"decision":"approve","comment":"` + strings.Repeat("x", MaxApprovalComment+1) + `"}`, "/comment", ApprovalBody{}},
		"trailing data":       {`{"decision":"approve"} {}`, "", ApprovalBody{}},
		"escaped member name": {`{"decision":"approve","a/b":1}`, "/a~1b", ApprovalBody{}},
		"lone surrogate":      {`{"decision":"approve","comment":"\ud800"}`, "", ApprovalBody{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, rerr := DecodeApprovalBody([]byte(tc.body))
			if tc.path == "-" {
				if rerr != nil || got != tc.want {
					t.Fatalf("= %+v, %v; want %+v", got, rerr, tc.want)
				}
				return
			}
			if rerr == nil || rerr.Code != CodeMalformedRequest || rerr.Path != tc.path {
				t.Fatalf("= %+v, %+v; want malformed-request at %q", got, rerr, tc.path)
			}
		})
	}
}

// FuzzDecodeApprovalBody: any body is refused with a JSON Pointer or gives
// a decision of the two, a comment within bounds, that decodes again the
// same after encoding.
func FuzzDecodeApprovalBody(f *testing.F) {
	for _, s := range []string{`{"decision":"approve"}`, `{"decision":"reject","comment":"x"}`, `{"decision":`,
		`{"decision":"approve","decision":"reject"}`, `{"comment":"\u00e9","decision":"approve"}`, `null`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, rerr := DecodeApprovalBody(body)
		if rerr != nil {
			if rerr.Code != CodeMalformedRequest || (rerr.Path != "" && !strings.HasPrefix(rerr.Path, "/")) {
				t.Fatalf("refusal %+v", rerr)
			}
			return
		}
		if (got.Decision != "approve" && got.Decision != "reject") || len(got.Comment) > MaxApprovalComment {
			t.Fatalf("accepted %+v", got)
		}
		again, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if back, rerr := DecodeApprovalBody(again); rerr != nil || back != got {
			t.Fatalf("re-decoded %s as %+v, %v; want %+v", again, back, rerr, got)
		}
	})
}
