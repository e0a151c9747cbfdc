package extauthz_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/extauthz"
)

// TestReportOncePerCall: a runtime's own report (POST /v1/outcome) goes
// through the gate's outcome path once per allowed call: concurrent
// reports record one frame, and a call whose response ext_proc judged
// takes no report after it.
func TestReportOncePerCall(t *testing.T) {
	e := newOutcomeEnv(t, binding.ModeEnforce, extauthz.ProcessorOptions{})
	args := map[string]any{"balance": 100, "amount": 25}
	request := []byte(`{"args":{"amount":25,"balance":100},"kind":"ledger.debit"}`)

	audit := e.allow(t, "ledger.debit", args, "rq-many")
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.gate.Report(context.Background(), &binding.Report{AuditID: audit, RequestID: "rq-many",
				Request: request, Status: 200, Result: []byte(`{"balance":75}`), Reporter: "rt", AllTenants: true})
		}()
	}
	wg.Wait()
	recorded := 0
	for _, err := range errs {
		switch {
		case err == nil:
			recorded++
		case !errors.Is(err, binding.ErrOutcomeReported):
			t.Errorf("report: %v, want nil or ErrOutcomeReported", err)
		}
	}
	got := e.outcomes(t, audit)
	if recorded != 1 || len(got) != 1 || got[0].ReportedBy != "runtime" || got[0].Reporter != "rt" || got[0].Outcome != "ok" {
		t.Fatalf("%d reports recorded, frames %+v; want one ok frame reported by the runtime", recorded, got)
	}

	// ext_proc judged this one; the runtime's report comes too late.
	proxied := e.allow(t, "ledger.debit", args, "rq-proxied")
	e.exchange(t, append(envoyRequest("ledger.debit", args, "rq-proxied", proxied), envoyResponse(200, `{"balance":75}`)...))
	_, err := e.gate.Report(context.Background(), &binding.Report{AuditID: proxied, RequestID: "rq-proxied",
		Request: request, Status: 200, Result: []byte(`{"balance":75}`), AllTenants: true})
	if !errors.Is(err, binding.ErrOutcomeReported) || len(e.outcomes(t, proxied)) != 1 {
		t.Errorf("report after ext_proc: %v, %d frames; want ErrOutcomeReported and the proxy's frame alone", err, len(e.outcomes(t, proxied)))
	}

	// A tenant-scoped reporter cannot report on a call bound to no
	// preflight; an unknown request id is no call.
	for name, rep := range map[string]binding.Report{
		"tenant-scoped":      {AuditID: audit, RequestID: "rq-many", Request: request, Status: 200, Result: []byte(`{}`), Tenant: "acme"},
		"unknown request id": {AuditID: audit, RequestID: "rq-none", Request: request, Status: 200, Result: []byte(`{}`), AllTenants: true},
	} {
		if _, err := e.gate.Report(context.Background(), &rep); !errors.Is(err, binding.ErrNoCall) {
			t.Errorf("%s: %v, want ErrNoCall", name, err)
		}
	}
}

// TestReportOfABodylessCall: a call checked without a body (its kind from
// gate.kind_header, as nginx and Caddy check it) has no args digest in its
// decision, so its runtime's report is judged with the args it names,
// which the gate never saw, rather than refused for not being {}.
func TestReportOfABodylessCall(t *testing.T) {
	e := newOutcomeEnv(t, binding.ModeEnforce, extauthz.ProcessorOptions{},
		func(o *binding.Options) { o.KindHeader = "x-autonomy-tool-kind" })
	d := e.gate.Check(context.Background(), &binding.Request{Method: "POST", Path: "/v1/tool",
		Headers: map[string]string{"x-autonomy-tool-kind": "ledger.soft", binding.HeaderRequestID: "rq-nobody"}})
	if !d.Allowed {
		t.Fatalf("body-less check: %+v", d)
	}
	v, err := e.gate.Report(context.Background(), &binding.Report{AuditID: d.AuditID, RequestID: "rq-nobody",
		Request: []byte(`{"args":{"amount":25,"balance":100},"kind":"ledger.soft"}`), Status: 200,
		Result: []byte(`{"balance":75}`), Reporter: "rt", AllTenants: true})
	if err != nil || !v.Judged {
		t.Fatalf("report: %+v, %v", v, err)
	}
	if got := e.outcomes(t, d.AuditID); len(got) != 1 || got[0].Outcome != "ok" {
		t.Fatalf("outcome frames %+v, want one ok", got)
	}
}
