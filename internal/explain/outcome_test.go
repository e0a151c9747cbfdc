package explain_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/contractrefine/autonomy/internal/explain"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

const auditOutcome = "au_tool_outcome_0001"

// outcomeFixture is a WAL holding, under auditOutcome, a preflight and
// then: a call whose response failed a postcondition (enforced: the
// caller got the 502), an advisory-mode call whose response broke the
// output contract (released), a denied call (no outcome), and a runtime's
// own report on a request no decision on the page names.
func outcomeFixture(t *testing.T) *wal.DB {
	t.Helper()
	db, err := wal.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	d := decisionWithAdvisory()
	d.PreflightID, d.AuditID = "pf_tool_outcome_0001", auditOutcome
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	b := preflight.Binding{PreflightID: d.PreflightID, AuditID: auditOutcome, Outcome: d.Outcome, ActorID: "user:example",
		ExpiresAt: t0.Add(5 * time.Minute), Steps: []preflight.BoundStep{{ID: "s1", Kind: "refund.create.v2", ArgsDigest: "sha256:x"}}}
	if _, err := db.RecordPreflight(ctx, wal.PreflightRecord{Binding: b, Decision: raw, Time: t0,
		Submit: &wal.SubmitAttrs{IntentSummary: "Refund case 882", Attempt: 1, Reason: d.Reason}}); err != nil {
		t.Fatal(err)
	}
	decision := func(at time.Duration, attrs *wal.DecisionAttrs) {
		attrs.PreflightID, attrs.Method, attrs.Path = d.PreflightID, "POST", "/v1/tool"
		if _, err := db.AppendDecision(ctx, wal.FrameInput{Kind: wal.KindDecision, AuditID: auditOutcome, Time: t0.Add(at), Attrs: attrs}); err != nil {
			t.Fatal(err)
		}
	}
	outcome := func(at time.Duration, attrs wal.OutcomeAttrs) {
		attrs.PreflightID = d.PreflightID
		if _, err := db.AppendOutcome(ctx, wal.OutcomeRecord{AuditID: auditOutcome, Time: t0.Add(at), Attrs: attrs}); err != nil {
			t.Fatal(err)
		}
	}
	decision(time.Second, &wal.DecisionAttrs{Outcome: "allow", Enforced: true, Mode: "enforce", Reason: preflight.ReasonPassed,
		Status: 200, ToolKind: "refund.create.v2", StepID: "s1", RequestID: "req-o1"})
	outcome(2*time.Second, wal.OutcomeAttrs{Outcome: wal.OutcomeViolated, Reason: preflight.ReasonPostconditionViolated,
		Enforced: true, Mode: "enforce", Status: 200, ResponseDigest: "sha256:0123456789abcdef0123456789abcdef", ResponseBytes: 42,
		ResultJSON: true, StepID: "s1", ToolKind: "refund.create.v2", RequestID: "req-o1", ReportedBy: wal.ReporterGateway,
		Clauses: []wal.OutcomeClause{
			{Kind: "postcondition", Index: 0, Expression: "status == 200", Held: true, Strict: true},
			{Kind: "postcondition", Index: 1, Expression: `result.state == "<b>done</b>"`, Held: false, Strict: true,
				Message: `refund <b onmouseover=1>not</b> confirmed`, Reason: preflight.ReasonPostconditionViolated},
		}})
	decision(3*time.Second, &wal.DecisionAttrs{Outcome: "allow", Enforced: true, Mode: "advisory", Reason: preflight.ReasonPassed,
		Status: 200, ToolKind: "tool.echo", RequestID: "req-o2"})
	outcome(4*time.Second, wal.OutcomeAttrs{Outcome: wal.OutcomeViolated, Reason: preflight.ReasonOutputContractViolated,
		Mode: "advisory", Status: 200, ResponseBytes: 4096, ToolKind: "tool.echo", RequestID: "req-o2", ReportedBy: wal.ReporterEnvoy,
		Clauses: []wal.OutcomeClause{{Kind: preflight.ClauseOutputContract, Expression: "size(response) <= outputContract.maxBytes",
			Strict: true, Message: "output contract violated: the response body is 4096 bytes, over the envelope's outputContract.maxBytes of 1024",
			Reason: preflight.ReasonOutputContractViolated}}})
	decision(5*time.Second, &wal.DecisionAttrs{Outcome: "deny", Enforced: true, Mode: "enforce", Reason: preflight.ReasonReplay,
		Status: 403, ToolKind: "tool.echo", RequestID: "req-o3"})
	outcome(6*time.Second, wal.OutcomeAttrs{Outcome: wal.OutcomeOK, Reason: preflight.ReasonOutcomeOK, Mode: "enforce", Status: 201,
		ToolKind: "tool.echo", RequestID: "req-o9", ReportedBy: wal.ReporterRuntime, Reporter: "runtime:billing"})
	return db
}

// TestExplainPageShowsToolOutcomes: each decision row shows the outcome of
// its call, joined by request id (outcome, reason, status, enforced or
// not, each failed clause, recorded text escaped), and an outcome whose
// request id no decision names is a row of its own.
func TestExplainPageShowsToolOutcomes(t *testing.T) {
	rec := serve(t, outcomeFixture(t), nil, auditOutcome)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	doc := parseHTML(t, rec.Body)
	assertSelfContained(t, doc)
	if got := text(all(doc, tagClass("p", "summary"))[0]); !strings.HasPrefix(got, "3 tool decisions · 3 tool outcomes") {
		t.Errorf("summary %q", got)
	}
	events := all(byID(doc, "timeline"), tagClass("li", "event"))
	if len(events) != 4 {
		t.Fatalf("%d timeline events, want 4 (three decisions, one outcome of its own)", len(events))
	}
	outcomes := func(li *html.Node) []*html.Node { return all(li, tagClass("div", "outcome")) }

	// The enforced postcondition failure, on its decision's row.
	o := outcomes(events[0])
	if len(o) != 1 || attr(o[0], "class") != "outcome violated enforced" || attr(o[0], "data-outcome") != "violated" {
		t.Fatalf("request req-o1: %d outcomes", len(o))
	}
	contains(t, "req-o1 outcome", o[0],
		"tool outcome violated "+preflight.ReasonPostconditionViolated+" enforced · response replaced by 502",
		"status 200 · mode enforce · seen by gateway · response sha256:0123456789abc… · 42 bytes",
		"+2s")
	cl := all(o[0], tagClass("div", "clause"))
	if len(cl) != 1 {
		t.Fatalf("req-o1: %d failed clauses shown, want 1 (the held one is not a failure)", len(cl))
	}
	if got, want := text(cl[0]), `postcondition result.state == "<b>done</b>" did not hold: refund <b onmouseover=1>not</b> confirmed`; got != want {
		t.Errorf("failed clause %q, want %q", got, want)
	}
	if n := len(all(doc, func(n *html.Node) bool { return n.Data == "b" })); n != 0 {
		t.Errorf("recorded markup became %d elements", n)
	}
	if !strings.Contains(text(events[0]), "request req-o1") {
		t.Errorf("req-o1 row %q", text(events[0]))
	}

	// The output contract failure of an advisory-mode call, released.
	o = outcomes(events[1])
	if len(o) != 1 || attr(o[0], "class") != "outcome violated advisory" {
		t.Fatalf("request req-o2: %d outcomes", len(o))
	}
	contains(t, "req-o2 outcome", o[0],
		"tool outcome violated "+preflight.ReasonOutputContractViolated+" advisory · not enforced",
		"output_contract size(response) <= outputContract.maxBytes did not hold: output contract violated: the response body is 4096 bytes",
		"status 200 · mode advisory · seen by envoy · 4096 bytes")

	// The denied call has no outcome.
	if o = outcomes(events[2]); len(o) != 0 || attr(events[2], "class") != "event deny enforced" {
		t.Errorf("denied call: class %q, %d outcomes", attr(events[2], "class"), len(o))
	}

	// The runtime's report on a request no decision names: its own row.
	if got := attr(events[3], "class"); got != "event outcome-only ok" {
		t.Errorf("outcome row class %q", got)
	}
	contains(t, "outcome row", events[3],
		"+6s after the preflight outcome of tool.echo · request req-o9 No tool decision on this page has this request id.",
		"tool outcome ok "+preflight.ReasonOutcomeOK+" status 201 · mode enforce · seen by runtime (runtime:billing)")
	if o = outcomes(events[3]); len(o) != 1 || attr(o[0], "class") != "outcome ok" {
		t.Errorf("outcome row: %d outcomes", len(o))
	}
}

// frame is a frame of the audit join as BuildPage receives it.
func frame(t *testing.T, seq uint64, kind string, attrs any) wal.Frame {
	t.Helper()
	raw, err := json.Marshal(attrs)
	if err != nil {
		t.Fatal(err)
	}
	return wal.Frame{Seq: seq, Kind: kind, AuditID: "au_join", Attrs: raw,
		Timestamp: t0.Add(time.Duration(seq) * time.Second).Format(wal.TimestampFormat)}
}

// TestBuildPageJoinsOutcomes: an outcome goes to the decision that let its
// request through (the latest), a call with two reports shows both, and
// an outcome without a request id, or of a request no decision names, is
// a row of its own; none is dropped.
func TestBuildPageJoinsOutcomes(t *testing.T) {
	frames := []wal.Frame{
		frame(t, 1, wal.KindDecision, wal.DecisionAttrs{Outcome: "deny", Enforced: true, ToolKind: "tool.echo", RequestID: "req-a"}),
		frame(t, 2, wal.KindDecision, wal.DecisionAttrs{Outcome: "allow", Enforced: true, ToolKind: "tool.echo", RequestID: "req-a"}),
		frame(t, 3, wal.KindDecision, wal.DecisionAttrs{Outcome: "deny", Enforced: true, ToolKind: "tool.echo", RequestID: "req-a"}),
		frame(t, 4, wal.KindDecision, wal.DecisionAttrs{Outcome: "allow", Enforced: true, ToolKind: "tool.echo"}),
		frame(t, 5, wal.KindOutcome, wal.OutcomeAttrs{Outcome: wal.OutcomeOK, RequestID: "req-a", ReportedBy: wal.ReporterRuntime}),
		frame(t, 6, wal.KindOutcome, wal.OutcomeAttrs{Outcome: wal.OutcomeViolated, Warning: true, RequestID: "req-a", ReportedBy: wal.ReporterEnvoy,
			Clauses: []wal.OutcomeClause{{Kind: "postcondition", Expression: "x", Held: false, Strict: false, Message: "m"}}}),
		frame(t, 7, wal.KindOutcome, wal.OutcomeAttrs{Outcome: wal.OutcomeViolated, Enforced: true, Reason: preflight.ReasonOutcomeUnverified,
			Detail: "no response body"}),
		frame(t, 8, wal.KindOutcome, wal.OutcomeAttrs{Outcome: wal.OutcomeOK, RequestID: "req-z"}),
	}
	p, err := explain.BuildPage("au_join", frames)
	if err != nil {
		t.Fatal(err)
	}
	if p.Outcomes != 4 || p.Decisions() != 4 || len(p.Timeline) != 6 {
		t.Fatalf("%d outcomes, %d decisions, %d events; want 4, 4, 6", p.Outcomes, p.Decisions(), len(p.Timeline))
	}
	var seqs []uint64
	for _, o := range p.Timeline[1].Outcomes {
		seqs = append(seqs, o.Seq)
	}
	if len(seqs) != 2 || seqs[0] != 5 || seqs[1] != 6 {
		t.Fatalf("the allow of req-a shows outcomes %v, want [5 6]", seqs)
	}
	if got := p.Timeline[1].Outcomes[1]; got.Class() != "violated warning" || len(got.Failed) != 1 || got.Failed[0].Strict {
		t.Errorf("warning outcome %+v (class %q)", got, got.Class())
	}
	for _, i := range []int{0, 2, 3} {
		if n := len(p.Timeline[i].Outcomes); n != 0 {
			t.Errorf("event %d (seq %d) has %d outcomes", i, p.Timeline[i].Seq, n)
		}
	}
	for i, want := range map[int]uint64{4: 7, 5: 8} {
		e := p.Timeline[i]
		if !e.OutcomeOnly || e.Seq != want || len(e.Outcomes) != 1 || e.Outcomes[0].Seq != want {
			t.Errorf("event %d: %+v, want the outcome of seq %d as its own row", i, e, want)
		}
	}
	if got := p.Timeline[4]; got.Class() != "outcome-only violated enforced" || got.Outcomes[0].Detail != "no response body" {
		t.Errorf("unverified outcome row: class %q", got.Class())
	}
}

// contains reports each of wants that the text of n lacks.
func contains(t *testing.T, label string, n *html.Node, wants ...string) {
	t.Helper()
	got := text(n)
	for _, want := range wants {
		if !strings.Contains(got, want) {
			t.Errorf("%s %q\nlacks %q", label, got, want)
		}
	}
}
