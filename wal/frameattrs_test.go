package wal

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/preflight"
)

// attrsCases builds one value of each typed attrs from a few strings, a
// number and a flag, so that the table and the fuzz target below cover the
// same shapes: every optional member both set and not.
func attrsCases(s1, s2 string, n int, flag bool) map[string]typedAttrs {
	at := time.Date(2026, 6, 23, 14, 30, 5, n%1e9, time.UTC)
	opt := func(s string) string {
		if flag {
			return s
		}
		return ""
	}
	steps := []preflight.BoundStep{{ID: s1, Kind: s2, ArgsDigest: "sha256:" + s1}}
	if flag {
		steps = append(steps, preflight.BoundStep{ID: s2, Kind: s1, ArgsDigest: s2,
			Approval: &preflight.StepApproval{Authorities: []string{s1, s2}, ExpiresAt: at.Add(time.Minute)}})
	}
	decision, _ := canon.Marshal(map[string]any{"outcome": s1, "reason": s2, "attempt": n, "ok": flag})
	pf := &PreflightAttrs{ActorID: s1, Decision: decision, ExpiresAt: at, Outcome: preflight.Outcome(s2), Steps: steps,
		OutputMaxBytes: new(int64(n)), PreflightID: s1, Tenant: opt(s2), ActorRef: opt(s2 + s1)}
	submitted := *pf
	submitted.SubmitAttrs = &SubmitAttrs{Attempt: n, BundleRevision: s2, DryRun: flag, IntentSummary: s1, PlanHash: opt(s1),
		Reason: s2, RequestDigest: "sha256:" + s2, SessionID: opt(s2), SessionKey: opt(s1 + s2)}
	if flag {
		submitted.Request = json.RawMessage(`{"z": [1.50, 2e0], "a": {"b": null}}`)
	}
	rev := s2
	dec := &DecisionAttrs{Actor: opt(s1), AdvisoryReason: opt(s2), ArgsDigest: opt("sha256:" + s1), Enforced: flag,
		Method: s1, Mode: s2, Outcome: s1, Path: s2, PreflightID: s1, Reason: s2, RequestID: s1, Status: n, StepID: s2, ToolKind: s1}
	if flag {
		dec.Args = map[string]any{"n": json.Number("1.50"), s1: []any{s2, nil, true, 2.5}, "m": map[string]any{}}
		dec.BundleRevision = &rev
		dec.Clause = &DecisionClause{Kind: s1, Index: n, Expression: s2}
	}
	return map[string]typedAttrs{
		"preflight":           pf,
		"preflight submitted": &submitted,
		"decision":            dec,
		"consumed":            &ConsumedAttrs{ArgsDigest: opt(s2), PreflightID: s1, RequestID: s2, StepID: s1, ToolKind: s2},
		"approval": &ApprovalAttrs{Approver: s1, ArgsDigest: s2, Comment: opt(s1), Decision: s2, PreflightID: s1, Replica: opt(s2),
			Roles: []string{s2, s1}, StepID: s1, Subject: opt(s2), Tenant: opt(s1), ToolKind: s2},
	}
}

// checkAttrs holds each typed encoder to canon.Marshal of the same value
// (encoding/json and the struct's tags, then canonical form): the same
// bytes, or, for a string that is not UTF-8, an error (encoding/json would
// write U+FFFD; the log refuses such attrs, as it always has). It also
// checks that the bytes decode back into the same value.
func checkAttrs(t *testing.T, s1, s2 string, n int, flag bool) {
	t.Helper()
	valid := utf8.ValidString(s1) && utf8.ValidString(s2)
	for name, a := range attrsCases(s1, s2, n, flag) {
		got, err := EncodeAttrs(a)
		if !valid {
			if !errors.Is(err, canon.ErrInvalidUTF8) {
				t.Fatalf("%s: attrs with a string that is not UTF-8: %s, %v", name, got, err)
			}
			continue
		}
		want, werr := canon.Marshal(a)
		if err != nil || werr != nil {
			t.Fatalf("%s: typed encoder %v, canon.Marshal %v", name, err, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: typed encoder\n%s\nwant (canon.Marshal)\n%s", name, got, want)
		}
		back := reflect.New(reflect.TypeOf(a).Elem())
		if err := json.Unmarshal(got, back.Interface()); err != nil {
			t.Fatalf("%s: %s does not decode: %v", name, got, err)
		}
		again, err := EncodeAttrs(back.Interface())
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("%s: decoded and written again\n%s, %v\nwant\n%s", name, again, err, got)
		}
	}
}

func TestTypedAttrsAsCanonMarshal(t *testing.T) {
	for _, tc := range []struct {
		s1, s2 string
		n      int
		flag   bool
	}{
		{"pf_1", "tool.echo", 1, true},
		{"pf_1", "tool.echo", 0, false},
		{"", "", 0, true},
		{"a<b>&c", "é\u2028\U0001F600", 200, true},
		{"quote\" backslash\\ tab\t nl\n \u0001", "\u007f", -3, false},
		{"x", "y", 1 << 40, true},
		{"not \xff UTF-8", "ok", 1, true},
	} {
		checkAttrs(t, tc.s1, tc.s2, tc.n, tc.flag)
	}
}

func FuzzTypedAttrs(f *testing.F) {
	f.Add("pf_1", "tool.echo", 1, true)
	f.Add("a<b>&c", "é\u2028", 0, false)
	f.Add("\x00\x1f\"\\", "\xff", -1, true)
	f.Fuzz(func(t *testing.T, s1, s2 string, n int, flag bool) {
		// Numbers the log writes are counts and HTTP statuses, well within
		// a double's exact integers.
		checkAttrs(t, s1, s2, n%(1<<53), flag)
	})
}

// TestTypedAttrsNilSlices: a nil list is written as [], as the log always
// has (encoding/json would write null).
func TestTypedAttrsNilSlices(t *testing.T) {
	for a, want := range map[typedAttrs]string{
		&ApprovalAttrs{}: `"roles":[]`,
		&PreflightAttrs{Steps: []preflight.BoundStep{{Approval: &preflight.StepApproval{}}}}: `"authorities":[]`,
		&PreflightAttrs{}: `"steps":[]`,
	} {
		if got, err := EncodeAttrs(a); err != nil || !bytes.Contains(got, []byte(want)) {
			t.Errorf("%T: %s, %v; want %s", a, got, err, want)
		}
	}
	bad := PreflightRecord{Binding: testBinding("pf_attrs", "tool.echo"), Decision: json.RawMessage(`{"outcome":`), Time: t0}
	if _, err := EncodeAttrs(bad.attrs()); err == nil {
		t.Fatal("a decision that is not JSON was taken")
	}
}

// TestCheckedDecisionIsStoredAlike: DecisionChecked spares the decision's
// parse and nothing else; the attrs are the same bytes.
func TestCheckedDecisionIsStoredAlike(t *testing.T) {
	raw, err := os.ReadFile("../internal/httpapi/testdata/golden/echo_no_session.json")
	if err != nil {
		t.Fatal(err)
	}
	rec := PreflightRecord{Binding: testBinding("pf_attrs", "tool.echo"), Decision: raw, Time: t0}
	plain, err := EncodeAttrs(rec.attrs())
	if err != nil {
		t.Fatal(err)
	}
	rec.DecisionChecked = true
	checked, err := EncodeAttrs(rec.attrs())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(plain, checked) {
		t.Fatalf("attrs differ with DecisionChecked:\n%s\n%s", plain, checked)
	}
}
