package envelope

import (
	"slices"
	"strings"
	"testing"
)

// FuzzValidate feeds Validate arbitrary bytes; its seed corpus is the contract's
// three examples (testdata/fuzz/FuzzValidate). Whatever the input, Validate
// must not panic, must answer the same way twice, and must keep its
// promises about what it returns.
func FuzzValidate(f *testing.F) {
	f.Add([]byte(`{"contractVersion": "aruntime.runtime-request.v2"}`))
	f.Add([]byte(`{"budget": {"maxCostUsd": 0e-99999999}, "input": {"a": 1, "a": 2}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		env, errs := Validate(raw)
		again, errsAgain := Validate(raw)
		if !slices.Equal(errs, errsAgain) || (env == nil) != (again == nil) {
			t.Fatalf("not deterministic: %+v then %+v", errs, errsAgain)
		}
		if len(errs) == 0 {
			if env == nil {
				t.Fatal("no errors and no envelope")
			}
			if env.IdempotencyKey == "" || env.RequestID == "" {
				t.Fatalf("accepted envelope without ids: %+v", env)
			}
			if !slices.Contains([]string{"low", "medium", "high", "critical"}, env.RiskLevel) {
				t.Fatalf("accepted risk level %q", env.RiskLevel)
			}
			if !slices.Contains(SupportedVersions, env.ContractVersion) {
				t.Fatalf("accepted contract version %q", env.ContractVersion)
			}
			if env.Timestamp.IsZero() || (!env.Deadline.IsZero() && env.Deadline.Before(env.Timestamp)) {
				t.Fatalf("accepted times %v, %v", env.Timestamp, env.Deadline)
			}
			if len(env.Input) == 0 || env.Input[0] != '{' {
				t.Fatalf("accepted input %q", env.Input)
			}
			return
		}
		if env != nil {
			t.Fatalf("envelope %+v returned with errors %+v", env, errs)
		}
		seen := make(map[string]bool, len(errs))
		for _, e := range errs {
			switch {
			case e.Code == CodeUnsupportedVersion && (len(errs) != 1 || e.Path != "/contractVersion"):
				t.Fatalf("unsupported version not alone at /contractVersion: %+v", errs)
			case e.Code != CodeUnsupportedVersion && e.Code != CodeValidationFailed:
				t.Fatalf("unknown code: %+v", e)
			case e.Path != "" && !strings.HasPrefix(e.Path, "/"):
				t.Fatalf("path is not a JSON Pointer: %+v", e)
			case e.Message == "":
				t.Fatalf("empty message: %+v", e)
			case seen[e.Path]:
				t.Fatalf("two errors at %q: %+v", e.Path, errs)
			}
			seen[e.Path] = true
		}
	})
}
