package preflight

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeOutcomeReport(t *testing.T) {
	const ok = `{"audit_id":"au_1","request_id":"rq-1","request":{"kind":"ledger.debit","args":{"b":1.50,"a":2}},"status":200,"result":{"balance":75}}`
	tests := map[string]struct {
		body, path string // path "-": accepted
	}{
		"whole":               {ok, "-"},
		"ids and null result": {`{"audit_id":"a","request_id":"r","preflight_id":"pf_1","step_id":"s1","request":{},"status":502,"result":null}`, "-"},
		"empty":               {``, ""},
		"not an object":       {`[]`, ""},
		"no audit id":         {strings.Replace(ok, `"audit_id":"au_1",`, "", 1), "/audit_id"},
		"empty request id":    {strings.Replace(ok, `"rq-1"`, `" "`, 1), "/request_id"},
		"audit id null":       {strings.Replace(ok, `"au_1"`, `null`, 1), "/audit_id"},
		"no request":          {strings.Replace(ok, `"request":{"kind":"ledger.debit","args":{"b":1.50,"a":2}},`, "", 1), "/request"},
		"no status":           {strings.Replace(ok, `"status":200,`, "", 1), "/status"},
		"status fractional":   {strings.Replace(ok, `200`, `200.5`, 1), "/status"},
		"status 600":          {strings.Replace(ok, `200`, `600`, 1), "/status"},
		"no result":           {strings.Replace(ok, `,"result":{"balance":75}`, "", 1), "/result"},
		"unknown member":      {strings.Replace(ok, `"status"`, `"verdict":"ok","status"`, 1), "/verdict"},
		"case twin":           {strings.Replace(ok, `"status":200`, `"status":200,"Status":200`, 1), "/Status"},
		"duplicate in args":   {strings.Replace(ok, `"a":2`, `"a":2,"a":3`, 1), "/request/args/a"},
		"inexact number":      {strings.Replace(ok, `75`, `9007199254740993`, 1), "/result/balance"},
		"trailing data":       {ok + ` {}`, ""},
		"id too long":         {strings.Replace(ok, `"au_1"`, `"`+strings.Repeat("x", MaxReportID+1)+`"`, 1), "/audit_id"},
		"too deep":            {strings.Replace(ok, `{"balance":75}`, strings.Repeat("[", MaxNesting+1)+strings.Repeat("]", MaxNesting+1), 1), ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, rerr := DecodeOutcomeReport([]byte(tc.body))
			if tc.path == "-" {
				if rerr != nil {
					t.Fatalf("refused: %+v", rerr)
				}
				return
			}
			if rerr == nil || rerr.Code != CodeMalformedRequest || rerr.Path != tc.path {
				t.Fatalf("= %+v, %+v; want malformed-request at %q", got, rerr, tc.path)
			}
		})
	}
	got, _ := DecodeOutcomeReport([]byte(ok))
	if string(got.Request) != `{"args":{"a":2,"b":1.5},"kind":"ledger.debit"}` || string(got.Result) != `{"balance":75}` || got.Status != 200 {
		t.Errorf("decoded %+v (request %s), want canonical request and result", got, got.Request)
	}
}

// FuzzDecodeOutcomeReport: any body is refused with a JSON Pointer, or
// gives the ids it must, a status in range, and canonical request and
// result that decode again to the same report.
func FuzzDecodeOutcomeReport(f *testing.F) {
	for _, s := range []string{`{"audit_id":"a","request_id":"r","request":{"kind":"k","args":{}},"status":200,"result":{"x":1}}`,
		`{"audit_id":"a","request_id":"r","request":null,"status":599,"result":[1,"\u00e9",true]}`,
		`{"audit_id":"a","audit_id":"b"}`, `{"status":1e3}`, `null`, "\xff", `{"result":{"a":1,"A":2}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, rerr := DecodeOutcomeReport(body)
		if rerr != nil {
			if rerr.Code != CodeMalformedRequest || (rerr.Path != "" && !strings.HasPrefix(rerr.Path, "/")) {
				t.Fatalf("refusal %+v", rerr)
			}
			return
		}
		if strings.TrimSpace(got.AuditID) == "" || strings.TrimSpace(got.RequestID) == "" || got.Status < 100 || got.Status > 599 ||
			!json.Valid(got.Request) || !json.Valid(got.Result) {
			t.Fatalf("accepted %+v", got)
		}
		again, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		back, rerr := DecodeOutcomeReport(again)
		if rerr != nil || back.AuditID != got.AuditID || string(back.Request) != string(got.Request) || string(back.Result) != string(got.Result) {
			t.Fatalf("re-decoded %s as %+v, %v; want %+v", again, back, rerr, got)
		}
	})
}
