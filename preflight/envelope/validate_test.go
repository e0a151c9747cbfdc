package envelope

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	return raw
}

// mutate decodes the minimal example, lets edit change it and encodes it
// again. Members come out in alphabetical order, so ordering tests build
// their documents by hand instead.
func mutate(t *testing.T, edit func(m map[string]any)) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(fixture(t, "minimal.json")))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode minimal.json: %v", err)
	}
	edit(m)
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return raw
}

func section(m map[string]any, name string) map[string]any {
	return m[name].(map[string]any)
}

// paths lists the paths of errs, all of which must carry code.
func paths(t *testing.T, errs []FieldError, code string) []string {
	t.Helper()
	out := make([]string, len(errs))
	for i, e := range errs {
		if e.Code != code {
			t.Errorf("error %d %+v: code %q, want %q", i, e, e.Code, code)
		}
		if e.Message == "" {
			t.Errorf("error %d %+v: empty message", i, e)
		}
		out[i] = e.Path
	}
	return out
}

func TestValidateSeedExamples(t *testing.T) {
	ts := time.Date(2026, 6, 23, 14, 30, 0, 0, time.UTC)
	tests := map[string]struct {
		file string
		want Envelope
	}{
		"minimal": {
			file: "minimal.json",
			want: Envelope{
				ContractVersion: ContractVersion,
				RequestID:       "req_20260623_001",
				IdempotencyKey:  "idem_answer_001",
				Timestamp:       ts,
				Deadline:        ts.Add(20 * time.Second),
				ActorIDRef:      "user:example",
				TenantIDRef:     "tenant:demo",
				SessionIDRef:    "session:001",
				RiskLevel:       "medium",
				Input:           json.RawMessage("{\n\"question\": \"Summarize the approved architecture record.\"\n}"),
				AllowedTools:    []string{"document.search.v2"},
				ToolPolicy:      ToolPolicy{DefaultDecision: "deny", MaxCalls: 4, AllowSideEffects: false},
				Budget:          Budget{MaxToolCalls: 4},
				Approval:        ApprovalPolicy{Mode: "policy-driven", RequiredFor: []string{}, TimeoutSeconds: 300, AuthorityRefs: []string{}},
				OutputMaxBytes:  new(int64(64000)),
			},
		},
		"high-risk": {
			file: "high-risk.json",
			want: Envelope{
				ContractVersion: ContractVersion,
				RequestID:       "req_20260623_002",
				IdempotencyKey:  "idem_refund_case_882",
				Timestamp:       ts,
				Deadline:        ts.Add(20 * time.Second),
				ActorIDRef:      "user:example",
				TenantIDRef:     "tenant:demo",
				SessionIDRef:    "session:001",
				RiskLevel:       "high",
				Input:           json.RawMessage("{\n\"caseRef\": \"case:882\",\n\"amountUsd\": 125\n}"),
				AllowedTools:    []string{"customer.read.v3", "refund.create.v2"},
				ToolPolicy:      ToolPolicy{DefaultDecision: "deny", MaxCalls: 5, AllowSideEffects: true},
				Budget:          Budget{MaxToolCalls: 4},
				Approval: ApprovalPolicy{Mode: ApprovalModeAlways, RequiredFor: []string{"financial-high-impact"},
					TimeoutSeconds: 900, AuthorityRefs: []string{"role:refund-approver"}},
				OutputMaxBytes: new(int64(64000)),
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			env, errs := Validate(fixture(t, tc.file))
			if len(errs) != 0 {
				t.Fatalf("errors: %+v", errs)
			}
			assertEnvelope(t, env, &tc.want)
		})
	}
}

func assertEnvelope(t *testing.T, got, want *Envelope) {
	t.Helper()
	if got == nil {
		t.Fatal("nil envelope")
	}
	if !bytes.Equal(got.Input, want.Input) {
		t.Errorf("Input = %q, want %q", got.Input, want.Input)
	}
	if !got.Timestamp.Equal(want.Timestamp) || !got.Deadline.Equal(want.Deadline) {
		t.Errorf("times = %v, %v; want %v, %v", got.Timestamp, got.Deadline, want.Timestamp, want.Deadline)
	}
	if (got.AllowedTools == nil) != (want.AllowedTools == nil) || !slices.Equal(got.AllowedTools, want.AllowedTools) {
		t.Errorf("AllowedTools = %#v, want %#v", got.AllowedTools, want.AllowedTools)
	}
	g, w := *got, *want
	g.Input, w.Input = nil, nil
	g.Timestamp, w.Timestamp = time.Time{}, time.Time{}
	g.Deadline, w.Deadline = time.Time{}, time.Time{}
	g.AllowedTools, w.AllowedTools = nil, nil
	gj, _ := json.Marshal(g)
	wj, _ := json.Marshal(w)
	if !bytes.Equal(gj, wj) {
		t.Errorf("envelope = %s\nwant       %s", gj, wj)
	}
}

func TestValidateInvalidExample(t *testing.T) {
	env, errs := Validate(fixture(t, "invalid.json"))
	if env != nil {
		t.Errorf("envelope = %+v, want nil", env)
	}
	want := []FieldError{
		{Code: CodeValidationFailed, Path: "/idempotencyKey", Message: "A stable idempotency key is required."},
		{Code: CodeValidationFailed, Path: "/timestampUtc", Message: "timestampUtc must be an RFC 3339 UTC timestamp ending in Z."},
		{Code: CodeValidationFailed, Path: "/riskLevel", Message: "riskLevel must be one of: low, medium, high, critical."},
	}
	if !slices.Equal(errs, want) {
		t.Errorf("errors:\n got %+v\nwant %+v", errs, want)
	}
}

func TestValidateRules(t *testing.T) {
	tests := map[string]struct {
		edit      func(m map[string]any)
		wantPaths []string                    // nil: accepted
		check     func(*testing.T, *Envelope) // on acceptance
	}{
		"deadline before timestamp": {
			edit:      func(m map[string]any) { m["deadlineUtc"] = "2026-06-23T14:29:59Z" },
			wantPaths: []string{"/deadlineUtc"},
		},
		"approval always with classes and no authority": {
			edit: func(m map[string]any) {
				m["approvalPolicy"] = map[string]any{"mode": "always", "requiredFor": []any{"financial-high-impact"},
					"timeoutSeconds": 900, "authorityRefs": []any{}}
			},
			wantPaths: []string{"/approvalPolicy/authorityRefs"},
		},
		// A class or authority no capability or token could match would
		// silently ask for no approval, or for one nobody can give.
		"approval class with white space": {
			edit: func(m map[string]any) {
				m["approvalPolicy"] = map[string]any{"mode": "always", "requiredFor": []any{"read "},
					"timeoutSeconds": 900, "authorityRefs": []any{"role:refund-approver"}}
			},
			wantPaths: []string{"/approvalPolicy/requiredFor/0"},
		},
		"approval authority with white space": {
			edit: func(m map[string]any) {
				m["approvalPolicy"] = map[string]any{"mode": "always", "requiredFor": []any{"financial-high-impact"},
					"timeoutSeconds": 900, "authorityRefs": []any{"role:a", " role:b"}}
			},
			wantPaths: []string{"/approvalPolicy/authorityRefs/1"},
		},
		"approval authority twice": {
			edit: func(m map[string]any) {
				m["approvalPolicy"] = map[string]any{"mode": "always", "requiredFor": []any{"financial-high-impact"},
					"timeoutSeconds": 900, "authorityRefs": []any{"role:a", "role:a"}}
			},
			wantPaths: []string{"/approvalPolicy/authorityRefs/1"},
		},
		"approval always with no classes accepted": {
			edit: func(m map[string]any) {
				m["approvalPolicy"] = map[string]any{"mode": "always", "requiredFor": []any{}, "authorityRefs": []any{}}
			},
		},
		// A mode spelt otherwise is not read as one asking for no approval:
		// "Always" would have dropped the approval the envelope asks for.
		"approval mode in another case": {
			edit: func(m map[string]any) {
				m["approvalPolicy"] = map[string]any{"mode": "Always", "requiredFor": []any{"financial-high-impact"},
					"timeoutSeconds": 900, "authorityRefs": []any{"role:refund-approver"}}
			},
			wantPaths: []string{"/approvalPolicy/mode"},
		},
		"approval mode unknown": {
			edit:      func(m map[string]any) { m["approvalPolicy"] = map[string]any{"mode": "sometimes"} },
			wantPaths: []string{"/approvalPolicy/mode"},
		},
		"approval mode with white space": {
			edit:      func(m map[string]any) { m["approvalPolicy"] = map[string]any{"mode": "always "} },
			wantPaths: []string{"/approvalPolicy/mode"},
		},
		"approval mode missing": {
			edit:      func(m map[string]any) { m["approvalPolicy"] = map[string]any{"requiredFor": []any{}} },
			wantPaths: []string{"/approvalPolicy/mode"},
		},
		"approval mode never accepted": {
			edit: func(m map[string]any) { m["approvalPolicy"] = map[string]any{"mode": "never"} },
		},
		"approval mode policy-driven accepted": {
			edit: func(m map[string]any) { m["approvalPolicy"] = map[string]any{"mode": "policy-driven"} },
		},
		// Inexact numbers would make two different envelopes one canonical
		// request: 9007199254740993 reads as 9007199254740992.
		"input integer beyond 2^53": {
			edit:      func(m map[string]any) { m["input"] = map[string]any{"ticket": json.Number("9007199254740993")} },
			wantPaths: []string{"/input/ticket"},
		},
		"input decimal past a double's digits": {
			edit:      func(m map[string]any) { m["input"] = map[string]any{"x": json.Number("1.0000000000000001")} },
			wantPaths: []string{"/input/x"},
		},
		"input numbers a double holds accepted": {
			edit: func(m map[string]any) {
				m["input"] = map[string]any{"a": json.Number("9007199254740992"), "b": json.Number("125.0"), "c": json.Number("-0"), "d": json.Number("5e-324")}
			},
		},
		"deadline equal to timestamp accepted": {
			edit: func(m map[string]any) { m["deadlineUtc"] = m["timestampUtc"] },
		},
		"deadline absent accepted as zero": {
			edit: func(m map[string]any) { delete(m, "deadlineUtc") },
			check: func(t *testing.T, env *Envelope) {
				if !env.Deadline.IsZero() {
					t.Errorf("Deadline = %v, want zero", env.Deadline)
				}
			},
		},
		"deadline with numeric offset": {
			edit:      func(m map[string]any) { m["deadlineUtc"] = "2026-06-23T14:30:20+00:00" },
			wantPaths: []string{"/deadlineUtc"},
		},
		"deadline null": {
			edit:      func(m map[string]any) { m["deadlineUtc"] = nil },
			wantPaths: []string{"/deadlineUtc"},
		},
		"deadline as object": {
			edit:      func(m map[string]any) { m["deadlineUtc"] = map[string]any{"at": "2026-06-23T14:30:20Z"} },
			wantPaths: []string{"/deadlineUtc"},
		},
		"timestamp with negative offset": {
			edit:      func(m map[string]any) { m["timestampUtc"] = "2026-06-23T09:30:00-05:00" },
			wantPaths: []string{"/timestampUtc"},
		},
		"timestamp with lower-case z": {
			edit:      func(m map[string]any) { m["timestampUtc"] = "2026-06-23T14:30:00z" },
			wantPaths: []string{"/timestampUtc"},
		},
		"timestamp not a calendar date": {
			edit:      func(m map[string]any) { m["timestampUtc"] = "2026-02-30T14:30:00Z" },
			wantPaths: []string{"/timestampUtc"},
		},
		"timestamp date only": {
			edit:      func(m map[string]any) { m["timestampUtc"] = "2026-06-23" },
			wantPaths: []string{"/timestampUtc"},
		},
		"timestamp as number": {
			edit:      func(m map[string]any) { m["timestampUtc"] = 1782225000 },
			wantPaths: []string{"/timestampUtc"},
		},
		"timestamp with fraction accepted": {
			edit: func(m map[string]any) { m["timestampUtc"] = "2026-06-23T14:30:00.125Z" },
			check: func(t *testing.T, env *Envelope) {
				if env.Timestamp.Nanosecond() != 125_000_000 {
					t.Errorf("Timestamp = %v, want .125 s", env.Timestamp)
				}
			},
		},
		"tenant null accepted": {
			edit: func(m map[string]any) { m["tenant"] = nil },
			check: func(t *testing.T, env *Envelope) {
				if env.TenantIDRef != "" {
					t.Errorf("TenantIDRef = %q, want empty", env.TenantIDRef)
				}
			},
		},
		"session null and tenant absent accepted": {
			edit: func(m map[string]any) { m["session"] = nil; delete(m, "tenant") },
			check: func(t *testing.T, env *Envelope) {
				if env.SessionIDRef != "" || env.TenantIDRef != "" {
					t.Errorf("SessionIDRef, TenantIDRef = %q, %q; want empty", env.SessionIDRef, env.TenantIDRef)
				}
			},
		},
		"tenant as string": {
			edit:      func(m map[string]any) { m["tenant"] = "tenant:demo" },
			wantPaths: []string{"/tenant"},
		},
		"tenant without idRef": {
			edit:      func(m map[string]any) { delete(section(m, "tenant"), "idRef") },
			wantPaths: []string{"/tenant/idRef"},
		},
		"actor without idRef": {
			edit:      func(m map[string]any) { delete(section(m, "actor"), "idRef") },
			wantPaths: []string{"/actor/idRef"},
		},
		"actor as array": {
			edit:      func(m map[string]any) { m["actor"] = []any{"user:example"} },
			wantPaths: []string{"/actor"},
		},
		"empty ids": {
			edit: func(m map[string]any) {
				m["requestId"], m["correlationId"], m["idempotencyKey"] = "", "", ""
			},
			wantPaths: []string{"/correlationId", "/idempotencyKey", "/requestId"},
		},
		"request id as number": {
			edit:      func(m map[string]any) { m["requestId"] = 7 },
			wantPaths: []string{"/requestId"},
		},
		"risk level critical accepted": {
			edit: func(m map[string]any) { m["riskLevel"] = "critical" },
			check: func(t *testing.T, env *Envelope) {
				if env.RiskLevel != "critical" {
					t.Errorf("RiskLevel = %q", env.RiskLevel)
				}
			},
		},
		"risk level in capitals": {
			edit:      func(m map[string]any) { m["riskLevel"] = "HIGH" },
			wantPaths: []string{"/riskLevel"},
		},
		"risk level null": {
			edit:      func(m map[string]any) { m["riskLevel"] = nil },
			wantPaths: []string{"/riskLevel"},
		},
		"data classification unknown": {
			edit:      func(m map[string]any) { m["dataClassification"] = "secret" },
			wantPaths: []string{"/dataClassification"},
		},
		"input as array": {
			edit:      func(m map[string]any) { m["input"] = []any{} },
			wantPaths: []string{"/input"},
		},
		"permissions as string": {
			edit:      func(m map[string]any) { m["permissions"] = "read" },
			wantPaths: []string{"/permissions"},
		},
		"empty permission": {
			edit:      func(m map[string]any) { m["permissions"] = []any{"read:x", ""} },
			wantPaths: []string{"/permissions/1"},
		},
		"allowed tools absent is nil": {
			edit: func(m map[string]any) { delete(m, "allowedTools") },
			check: func(t *testing.T, env *Envelope) {
				if env.AllowedTools != nil {
					t.Errorf("AllowedTools = %#v, want nil", env.AllowedTools)
				}
			},
		},
		"allowed tools empty is empty, not nil": {
			edit: func(m map[string]any) { m["allowedTools"] = []any{} },
			check: func(t *testing.T, env *Envelope) {
				if env.AllowedTools == nil || len(env.AllowedTools) != 0 {
					t.Errorf("AllowedTools = %#v, want empty non-nil", env.AllowedTools)
				}
			},
		},
		"allowed tool not a string": {
			edit:      func(m map[string]any) { m["allowedTools"] = []any{"document.search.v2", 3} },
			wantPaths: []string{"/allowedTools/1"},
		},
		"negative max calls": {
			edit:      func(m map[string]any) { section(m, "toolPolicy")["maxCalls"] = -1 },
			wantPaths: []string{"/toolPolicy/maxCalls"},
		},
		"fractional max calls": {
			edit:      func(m map[string]any) { section(m, "toolPolicy")["maxCalls"] = json.Number("2.5") },
			wantPaths: []string{"/toolPolicy/maxCalls"},
		},
		"max calls written 4.0 accepted": {
			edit: func(m map[string]any) { section(m, "toolPolicy")["maxCalls"] = json.Number("4.0") },
			check: func(t *testing.T, env *Envelope) {
				if env.ToolPolicy.MaxCalls != 4 {
					t.Errorf("MaxCalls = %d, want 4", env.ToolPolicy.MaxCalls)
				}
			},
		},
		"max calls past int clamps": {
			edit: func(m map[string]any) { section(m, "toolPolicy")["maxCalls"] = json.Number("1e300") },
			check: func(t *testing.T, env *Envelope) {
				if env.ToolPolicy.MaxCalls != math.MaxInt {
					t.Errorf("MaxCalls = %d, want MaxInt", env.ToolPolicy.MaxCalls)
				}
			},
		},
		"max calls missing": {
			edit:      func(m map[string]any) { delete(section(m, "toolPolicy"), "maxCalls") },
			wantPaths: []string{"/toolPolicy/maxCalls"},
		},
		"allow side effects as string": {
			edit:      func(m map[string]any) { section(m, "toolPolicy")["allowSideEffects"] = "false" },
			wantPaths: []string{"/toolPolicy/allowSideEffects"},
		},
		"negative max cost": {
			edit:      func(m map[string]any) { section(m, "budget")["maxCostUsd"] = json.Number("-0.01") },
			wantPaths: []string{"/budget/maxCostUsd"},
		},
		"max tool calls missing": {
			edit:      func(m map[string]any) { delete(section(m, "budget"), "maxToolCalls") },
			wantPaths: []string{"/budget/maxToolCalls"},
		},
		"negative ttl": {
			edit:      func(m map[string]any) { section(m, "memoryPolicy")["ttlSeconds"] = -5 },
			wantPaths: []string{"/memoryPolicy/ttlSeconds"},
		},
		"retention policy as string": {
			edit:      func(m map[string]any) { m["retentionPolicy"] = "30d" },
			wantPaths: []string{"/retentionPolicy"},
		},
		"unknown fields accepted": {
			edit: func(m map[string]any) {
				m["futureOptionalField"] = map[string]any{"x": 1}
				section(m, "toolPolicy")["futureLimit"] = 3
			},
		},
		"contract version missing": {
			edit:      func(m map[string]any) { delete(m, "contractVersion") },
			wantPaths: []string{"/contractVersion"},
		},
		"contract version as number": {
			edit:      func(m map[string]any) { m["contractVersion"] = 1 },
			wantPaths: []string{"/contractVersion"},
		},
		"every required field missing": {
			edit: func(m map[string]any) {
				for k := range m {
					delete(m, k)
				}
			},
			wantPaths: []string{
				"/contractVersion", "/requestId", "/correlationId", "/idempotencyKey",
				"/timestampUtc", "/actor", "/taskType", "/riskLevel", "/input",
				"/permissions", "/contextPolicy", "/modelRouteConstraints", "/toolPolicy",
				"/memoryPolicy", "/budget", "/approvalPolicy", "/outputContract",
				"/traceSettings", "/dataClassification", "/retentionPolicy",
			},
		},
		"number beyond math/big in a checked field": {
			edit:      func(m map[string]any) { section(m, "budget")["maxCostUsd"] = json.Number("0e-99999999") },
			wantPaths: []string{"/budget/maxCostUsd"},
		},
		"number beyond float64 in input": {
			edit:      func(m map[string]any) { section(m, "input")["n/~"] = json.Number("1e400") },
			wantPaths: []string{"/input/n~1~0"},
		},
		"input keeps number literals": {
			edit: func(m map[string]any) {
				section(m, "input")["amount"] = json.Number("1.250e+2")
			},
			check: func(t *testing.T, env *Envelope) {
				if !bytes.Contains(env.Input, []byte("1.250e+2")) {
					t.Errorf("Input = %s, lost the literal", env.Input)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			env, errs := Validate(mutate(t, tc.edit))
			if tc.wantPaths == nil {
				if len(errs) != 0 {
					t.Fatalf("errors: %+v", errs)
				}
				if env == nil {
					t.Fatal("nil envelope with no errors")
				}
				if tc.check != nil {
					tc.check(t, env)
				}
				return
			}
			if env != nil {
				t.Errorf("envelope = %+v, want nil", env)
			}
			if got := paths(t, errs, CodeValidationFailed); !slices.Equal(got, tc.wantPaths) {
				t.Errorf("paths = %q, want %q (errors %+v)", got, tc.wantPaths, errs)
			}
		})
	}
}

func TestValidateUnsupportedVersion(t *testing.T) {
	tests := map[string]string{
		"next major":          "aruntime.runtime-request.v2",
		"empty":               "",
		"other contract":      "aruntime.runtime-response.v1",
		"different case":      "ARUNTIME.RUNTIME-REQUEST.V1",
		"trailing whitespace": "aruntime.runtime-request.v1 ",
	}
	for name, version := range tests {
		t.Run(name, func(t *testing.T) {
			// The other faults must not be reported: a consumer does not
			// guess the shape of a version it does not know.
			raw := mutate(t, func(m map[string]any) {
				m["contractVersion"] = version
				m["riskLevel"] = "urgent"
				delete(m, "idempotencyKey")
			})
			env, errs := Validate(raw)
			if env != nil {
				t.Errorf("envelope = %+v, want nil", env)
			}
			if len(errs) != 1 || errs[0].Code != CodeUnsupportedVersion || errs[0].Path != "/contractVersion" {
				t.Fatalf("errors = %+v, want one %s at /contractVersion", errs, CodeUnsupportedVersion)
			}
			if !strings.Contains(errs[0].Message, ContractVersion) {
				t.Errorf("message %q does not name the supported version", errs[0].Message)
			}
		})
	}
}

func TestValidateNotAnObject(t *testing.T) {
	tests := map[string]struct {
		raw     string
		message string
	}{
		"empty":           {"", msgNotJSON},
		"blank":           {" \n\t", msgNotJSON},
		"garbage":         {"contractVersion=v1", msgNotJSON},
		"truncated":       {`{"contractVersion": "aruntime.runtime-request.v1"`, msgNotJSON},
		"trailing comma":  {`{"a": 1,}`, msgNotJSON},
		"two objects":     {`{} {}`, msgNotJSON},
		"trailing text":   {`{}x`, msgNotJSON},
		"closing bracket": {`]`, msgNotJSON},
		"non-string key":  {`{1: 2}`, msgNotJSON},
		"too deep":        {strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2), msgNotJSON},
		"array":           {`[{"contractVersion": "aruntime.runtime-request.v1"}]`, msgNotObject},
		"null":            {`null`, msgNotObject},
		"string":          {`"aruntime.runtime-request.v1"`, msgNotObject},
		"number":          {`1`, msgNotObject},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			env, errs := Validate([]byte(tc.raw))
			if env != nil {
				t.Errorf("envelope = %+v, want nil", env)
			}
			want := []FieldError{{Code: CodeValidationFailed, Path: "", Message: tc.message}}
			if !slices.Equal(errs, want) {
				t.Errorf("errors = %+v, want %+v", errs, want)
			}
		})
	}
}

func TestValidateDuplicateMember(t *testing.T) {
	raw := bytes.Replace(fixture(t, "high-risk.json"),
		[]byte(`"riskLevel": "high",`),
		[]byte(`"riskLevel": "low", "riskLevel": "high",`), 1)
	if bytes.Equal(raw, fixture(t, "high-risk.json")) {
		t.Fatal("fixture did not change")
	}
	env, errs := Validate(raw)
	if env != nil {
		t.Errorf("envelope = %+v, want nil", env)
	}
	if got := paths(t, errs, CodeValidationFailed); !slices.Equal(got, []string{"/riskLevel"}) {
		t.Errorf("paths = %q, want [/riskLevel]", got)
	}
}

// TestValidateCaseOnlyMember: two names that differ only in letter case
// are one field to a Go runtime, so the envelope is refused, as the
// PreflightRequest decoder refuses such names.
func TestValidateCaseOnlyMember(t *testing.T) {
	raw := bytes.Replace(fixture(t, "high-risk.json"),
		[]byte(`"riskLevel": "high",`),
		[]byte(`"riskLevel": "high", "RiskLevel": "low",`), 1)
	if bytes.Equal(raw, fixture(t, "high-risk.json")) {
		t.Fatal("fixture did not change")
	}
	env, errs := Validate(raw)
	if env != nil {
		t.Errorf("envelope = %+v, want nil", env)
	}
	if got := paths(t, errs, CodeValidationFailed); !slices.Equal(got, []string{"/RiskLevel"}) {
		t.Errorf("paths = %q, want [/RiskLevel]", got)
	}
}

// member is one top-level member written in the order given, so tests can
// control document order.
type member struct {
	name  string
	value string // JSON text
}

func document(members ...member) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + m.name + `":` + m.value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// minimalMembers returns the minimal example's members in its own order.
func minimalMembers(t *testing.T) []member {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(fixture(t, "minimal.json")))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var out []member
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, member{key.(string), string(v)})
	}
	return out
}

func edited(ms []member, drop []string, set map[string]string) []member {
	var out []member
	for _, m := range ms {
		if slices.Contains(drop, m.name) {
			continue
		}
		if v, ok := set[m.name]; ok {
			m.value = v
		}
		out = append(out, m)
	}
	return out
}

func TestValidateErrorOrder(t *testing.T) {
	base := minimalMembers(t)
	reversed := slices.Clone(base)
	slices.Reverse(reversed)
	tests := map[string]struct {
		members []member
		want    []string
	}{
		"missing fields with no table predecessor come first": {
			members: edited(base, []string{"contractVersion", "requestId"}, map[string]string{"riskLevel": `"urgent"`}),
			want:    []string{"/contractVersion", "/requestId", "/riskLevel"},
		},
		"missing field follows its table predecessor in a reversed document": {
			members: edited(reversed, []string{"idempotencyKey"}, map[string]string{
				"riskLevel": `"urgent"`,
				"requestId": `""`,
			}),
			// The document reads riskLevel, ..., correlationId, requestId:
			// the missing key sits after correlationId.
			want: []string{"/riskLevel", "/idempotencyKey", "/requestId"},
		},
		"nested errors, then nested missing, then the next top-level gap": {
			members: edited(base, []string{"memoryPolicy"}, map[string]string{
				"toolPolicy":         `{"defaultDecision": "", "allowSideEffects": "no"}`,
				"dataClassification": `"secret"`,
			}),
			want: []string{
				"/toolPolicy/defaultDecision", "/toolPolicy/allowSideEffects",
				"/toolPolicy/maxCalls", "/memoryPolicy", "/dataClassification",
			},
		},
		"errors inside arrays in document order": {
			members: edited(base, nil, map[string]string{
				"permissions":  `["", "ok", 4]`,
				"allowedTools": `[1, ""]`,
			}),
			want: []string{"/permissions/0", "/permissions/2", "/allowedTools/0", "/allowedTools/1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			raw := document(tc.members...)
			_, errs := Validate(raw)
			if got := paths(t, errs, CodeValidationFailed); !slices.Equal(got, tc.want) {
				t.Errorf("paths = %q, want %q", got, tc.want)
			}
			// The schema library reports in map order; the result must not.
			for range 20 {
				if _, again := Validate(raw); !slices.Equal(again, errs) {
					t.Fatalf("second run differs:\n%+v\n%+v", errs, again)
				}
			}
		})
	}
}

func BenchmarkValidate(b *testing.B) {
	raw := fixture(b, "high-risk.json")
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, errs := Validate(raw); len(errs) != 0 {
			b.Fatal(errs)
		}
	}
}

// TestValidateConcurrent shares the compiled schema between goroutines, as
// the HTTP server does; run with -race it also checks for data races.
func TestValidateConcurrent(t *testing.T) {
	valid, invalid := fixture(t, "high-risk.json"), fixture(t, "invalid.json")
	_, wantErrs := Validate(invalid)
	results := make(chan string, 16)
	for i := range cap(results) {
		go func() {
			raw := valid
			if i%2 == 1 {
				raw = invalid
			}
			env, errs := Validate(raw)
			switch {
			case i%2 == 0 && (env == nil || env.IdempotencyKey != "idem_refund_case_882"):
				results <- "valid envelope not accepted"
			case i%2 == 1 && !slices.Equal(errs, wantErrs):
				results <- "invalid envelope reported differently"
			default:
				results <- ""
			}
		}()
	}
	for range cap(results) {
		if msg := <-results; msg != "" {
			t.Error(msg)
		}
	}
}
