package explain_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/contractrefine/autonomy/internal/explain"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

var t0 = time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC)

// fixture is a real WAL holding:
//   - au_page_fixture_0001: a pass preflight of tenant "acme" whose
//     decision_chain_complete row is an advisory failure and whose
//     rollback_contract row carries a hint, then an allowed call and an
//     advisory-mode deny that was let through;
//   - au_unbound_call_0001: a tool decision made without a preflight;
//   - au_hostile_text_0001: a preflight whose intent is markup.
type fixture struct {
	db *wal.DB
}

const (
	auditPage    = "au_page_fixture_0001"
	auditUnbound = "au_unbound_call_0001"
	auditHostile = "au_hostile_text_0001"
)

func decisionWithAdvisory() preflight.Decision {
	d := preflight.Decision{PreflightID: "pf_page_fixture_0001", AuditID: auditPage, Outcome: preflight.OutcomePass,
		Reason: preflight.ReasonPassed, ClauseResults: []preflight.Result{}, Attempt: 1,
		DecidedAt: t0.Format(time.RFC3339Nano),
		Eligibility: preflight.Eligibility{Allowed: true, BoundToolKinds: []string{"tool.echo", "refund.create.v2"},
			ExpiresAt: t0.Add(5 * time.Minute).Format(time.RFC3339)}}
	for _, c := range preflight.Catalog() {
		r := preflight.Result{Contract: c, Outcome: preflight.RowPass, Severity: preflight.SeverityBlocking,
			RepairHints: []preflight.Hint{}, Evidence: map[string]any{}}
		switch c {
		case preflight.ContractDecisionChainComplete:
			r.Outcome, r.Severity, r.Reason = preflight.RowFail, preflight.SeverityAdvisory, preflight.ReasonChainUnverifiableOffline
			r.Evidence = map[string]any{"violations": []any{map[string]any{"field": "/context/decision_chain/0",
				"message": "audit id au_elsewhere is not in the local WAL"}}}
		case preflight.ContractAttestationFreshness:
			r.Outcome, r.Severity = preflight.RowNotApplicable, preflight.SeverityInfo
			r.Evidence = map[string]any{"detail": "no step has side effects"}
		case preflight.ContractRollback:
			// A passing row carries no hints in practice; one is put here so
			// the hints section has something to show.
			r.RepairHints = []preflight.Hint{{Field: "/plan/steps/1/rollback", Suggestion: "rb.refund.void", Bounded: true}}
		}
		d.ContractResults = append(d.ContractResults, r)
	}
	return d
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db, err := wal.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	record := func(auditID, pfID, intent, tenant string, d preflight.Decision) {
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		b := preflight.Binding{PreflightID: pfID, AuditID: auditID, Outcome: d.Outcome, ActorID: "user:example",
			Tenant: tenant, ExpiresAt: t0.Add(5 * time.Minute),
			Steps: []preflight.BoundStep{{ID: "s1", Kind: "tool.echo", ArgsDigest: "sha256:x"}}}
		if _, err := db.RecordPreflight(ctx, wal.PreflightRecord{Binding: b, Decision: raw, Time: t0,
			Submit: &wal.SubmitAttrs{IntentSummary: intent, PlanHash: "plan-882-v1", SessionID: "session:001",
				Attempt: 1, Reason: d.Reason, BundleRevision: "rev-0123456789abcdef0123456789"}}); err != nil {
			t.Fatal(err)
		}
	}
	decision := func(auditID string, at time.Duration, attrs *wal.DecisionAttrs) {
		if _, err := db.AppendDecision(ctx, wal.FrameInput{Kind: wal.KindDecision, AuditID: auditID, Time: t0.Add(at), Attrs: attrs}); err != nil {
			t.Fatal(err)
		}
	}
	record(auditPage, "pf_page_fixture_0001", "Refund case 882", "acme", decisionWithAdvisory())
	decision(auditPage, 2*time.Second, &wal.DecisionAttrs{Outcome: "allow", Enforced: true, Mode: "advisory",
		Reason: preflight.ReasonPassed, Status: 200, ToolKind: "tool.echo", StepID: "s1", RequestID: "req-1",
		Method: "POST", Path: "/v1/tool", PreflightID: "pf_page_fixture_0001"})
	decision(auditPage, 3500*time.Millisecond, &wal.DecisionAttrs{Outcome: "deny", Enforced: false, Mode: "advisory",
		Reason: preflight.ReasonReplay, Status: 200, ToolKind: "tool.echo", RequestID: "req-2",
		Method: "POST", Path: "/v1/tool", PreflightID: "pf_page_fixture_0001"})
	decision(auditUnbound, time.Minute, &wal.DecisionAttrs{Outcome: "allow", Enforced: true, Mode: "advisory",
		Reason: "policy: allowed", Status: 200, ToolKind: "tool.sleep", RequestID: "req-3"})
	hostile := decisionWithAdvisory()
	hostile.AuditID = auditHostile
	record(auditHostile, "pf_hostile_text_0001", `<script>alert("x")</script><b onmouseover=1>bold</b>`, "", hostile)
	return &fixture{db: db}
}

// access is a fixed answer of the Access interface.
type access struct {
	tenant  string
	all, ok bool
}

func (a access) Authorize(*http.Request) (string, bool, bool) { return a.tenant, a.all, a.ok }

func serve(t *testing.T, store explain.Store, acc explain.Access, auditID string) *httptest.ResponseRecorder {
	t.Helper()
	o := explain.Options{Store: store}
	if acc != nil {
		o.Access = acc
	}
	mux := http.NewServeMux()
	mux.Handle(explain.Pattern, explain.New(o))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/audit/"+auditID, nil))
	return rec
}

func TestExplainPage(t *testing.T) {
	fx := newFixture(t)
	rec := serve(t, fx.db, nil, auditPage)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
	for h, want := range map[string]string{"Content-Type": "text/html; charset=utf-8", "X-Content-Type-Options": "nosniff",
		"Cache-Control": "no-store"} {
		if got := rec.Header().Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	doc := parseHTML(t, rec.Body)
	assertSelfContained(t, doc)

	if got := text(byID(doc, "audit-id")); got != auditPage {
		t.Errorf("audit id shown as %q", got)
	}
	if got := text(byID(doc, "intent-summary")); got != "Refund case 882" {
		t.Errorf("intent shown as %q", got)
	}
	if got := text(byID(doc, "outcome")) + " " + text(byID(doc, "reason")); got != "pass contract: passed" {
		t.Errorf("verdict shown as %q", got)
	}
	if got := text(byID(doc, "binding")); !strings.Contains(got, "tool.echo, refund.create.v2") {
		t.Errorf("binding shown as %q", got)
	}

	// Seven contract rows in catalog order; exactly one advisory failure,
	// marked by class, data attribute and a visible label.
	rows := all(byID(doc, "contracts"), tagClass("tr", "row"))
	var names []string
	for _, r := range rows {
		names = append(names, attr(r, "data-contract"))
	}
	if !slices.Equal(names, preflight.Catalog()) {
		t.Fatalf("contract rows %v, want %v", names, preflight.Catalog())
	}
	adv := all(doc, tagClass("tr", "row", "advisory"))
	if len(adv) != 1 || attr(adv[0], "data-contract") != preflight.ContractDecisionChainComplete || attr(adv[0], "data-state") != "advisory" {
		t.Fatalf("advisory rows: %d", len(adv))
	}
	labels := all(adv[0], tagClass("span", "advisory-label"))
	if len(labels) != 1 || text(labels[0]) != "advisory" {
		t.Fatalf("advisory row label: %d labels", len(labels))
	}
	if got := text(adv[0]); !strings.Contains(got, preflight.ReasonChainUnverifiableOffline) ||
		!strings.Contains(got, "audit id au_elsewhere is not in the local WAL") {
		t.Errorf("advisory row text %q", got)
	}
	if n := len(all(doc, tagClass("tr", "row", "blocking"))); n != 0 {
		t.Errorf("%d blocking rows on a pass", n)
	}
	if na := all(doc, tagClass("tr", "row", "not_applicable")); len(na) != 1 || !strings.Contains(text(na[0]), `{"detail":"no step has side effects"}`) {
		t.Errorf("not-applicable rows: %d", len(na))
	}
	if byID(doc, "clauses") != nil {
		t.Error("a clause section without clause rows")
	}
	for _, tr := range all(doc, tagClass("tr", "row", "pass")) {
		if ev := all(tr, tagClass("code", "evidence")); len(ev) != 0 {
			t.Errorf("a passing row shows evidence %q", text(ev[0]))
		}
	}
	for _, id := range []string{"audit-id", "preflight-id"} {
		if n := byID(doc, id); n == nil || attr(n, "class") != "id" {
			t.Errorf("#%s is not a code.id (ids must not wrap mid-token)", id)
		}
	}

	hints := all(byID(doc, "hints"), tagClass("tr", "hint"))
	if len(hints) != 1 {
		t.Fatalf("%d hints, want 1", len(hints))
	}
	var cells []string
	for _, td := range all(hints[0], func(n *html.Node) bool { return n.Data == "td" }) {
		cells = append(cells, text(td))
	}
	if want := []string{"/plan/steps/1/rollback", `"rb.refund.void"`, "rollback_contract", "yes"}; !slices.Equal(cells, want) {
		t.Fatalf("hint cells %q, want %q", cells, want)
	}

	events := all(byID(doc, "timeline"), tagClass("li", "event"))
	if len(events) != 2 {
		t.Fatalf("%d timeline events, want 2", len(events))
	}
	want := []struct{ class, text string }{
		// An allow is labelled neither enforced nor advisory: there was
		// nothing to enforce ("mode advisory · enforced" read as a
		// contradiction).
		{"allow enforced", "+2s after the preflight tool.echo · step s1 allow contract: passed mode advisory · status 200 · POST /v1/tool · request req-1"},
		{"deny not-enforced", "+3.5s after the preflight tool.echo deny advisory · not enforced contract: preflight_replay mode advisory"},
	}
	for i, w := range want {
		if got := attr(events[i], "class"); got != "event "+w.class {
			t.Errorf("event %d class %q, want %q", i, got, "event "+w.class)
		}
		if got := text(events[i]); !strings.Contains(got, w.text) {
			t.Errorf("event %d text %q\nlacks %q", i, got, w.text)
		}
	}
	if got := text(all(doc, tagClass("p", "summary"))[0]); got != "2 tool decisions · advisory 1 advisory signal recorded (it does not change the verdict)" {
		t.Errorf("summary %q", got)
	}
}

func TestExplainPageAnswers(t *testing.T) {
	fx := newFixture(t)
	closed, err := wal.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	tests := map[string]struct {
		store   explain.Store
		access  explain.Access
		auditID string
		status  int
		// title is the page's h1 text.
		title string
	}{
		"known id":                     {auditID: auditPage, status: 200, title: "Audit " + auditPage},
		"unknown id":                   {auditID: "au_never_recorded_01", status: 404, title: "Audit id not found"},
		"no credentials":               {access: access{ok: false}, auditID: auditPage, status: 401, title: "Not authorized"},
		"token of the tenant":          {access: access{tenant: "acme", ok: true}, auditID: auditPage, status: 200, title: "Audit " + auditPage},
		"token of another tenant":      {access: access{tenant: "globex", ok: true}, auditID: auditPage, status: 404, title: "Audit id not found"},
		"all-tenant token":             {access: access{all: true, ok: true}, auditID: auditPage, status: 200, title: "Audit " + auditPage},
		"tenant token, unbound call":   {access: access{tenant: "acme", ok: true}, auditID: auditUnbound, status: 404, title: "Audit id not found"},
		"calls made without preflight": {auditID: auditUnbound, status: 200, title: "Audit " + auditUnbound},
		"WAL unreadable":               {store: closed, auditID: auditPage, status: 503, title: "Audit log unavailable"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			store := tc.store
			if store == nil {
				store = fx.db
			}
			rec := serve(t, store, tc.access, tc.auditID)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d", rec.Code, tc.status)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "text/html; charset=utf-8" {
				t.Fatalf("Content-Type %q", ct)
			}
			doc := parseHTML(t, rec.Body)
			assertSelfContained(t, doc)
			h1 := all(doc, func(n *html.Node) bool { return n.Data == "h1" })
			if len(h1) != 1 || text(h1[0]) != tc.title {
				t.Fatalf("h1 = %q, want %q", text(h1[0]), tc.title)
			}
		})
	}
}

func TestExplainPageWithoutPreflight(t *testing.T) {
	fx := newFixture(t)
	doc := parseHTML(t, serve(t, fx.db, nil, auditUnbound).Body)
	if got := text(byID(doc, "verdict")); !strings.Contains(got, "No preflight is recorded") {
		t.Errorf("verdict %q", got)
	}
	if byID(doc, "contracts") != nil || byID(doc, "intent") != nil {
		t.Error("contract or intent section without a preflight")
	}
	events := all(doc, tagClass("li", "event"))
	if len(events) != 1 || !strings.Contains(text(events[0]), "tool.sleep allow policy: allowed") ||
		strings.Contains(text(events[0]), "after the preflight") {
		t.Fatalf("events: %d %q", len(events), text(events[0]))
	}
}

func TestExplainPageEscapesRecordedText(t *testing.T) {
	fx := newFixture(t)
	rec := serve(t, fx.db, nil, auditHostile)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	doc := parseHTML(t, strings.NewReader(rec.Body.String()))
	assertSelfContained(t, doc)
	if got := text(byID(doc, "intent-summary")); got != `<script>alert("x")</script><b onmouseover=1>bold</b>` {
		t.Fatalf("intent shown as %q", got)
	}
	if n := len(all(doc, func(n *html.Node) bool { return n.Data == "b" })); n != 0 {
		t.Fatalf("recorded markup became %d elements", n)
	}
}

// TestExplainPageEscapesControlCharacters: html/template escapes markup,
// not control or bidi characters; the page is read with curl too, so an
// escape sequence in recorded text (here the id in a 404's message) is
// shown escaped, never raw.
func TestExplainPageEscapesControlCharacters(t *testing.T) {
	fx := newFixture(t)
	rec := serve(t, fx.db, nil, url.PathEscape("au_\x1b[2J\x1b]0;owned\x07\u202e"))
	body := rec.Body.String()
	if strings.ContainsAny(body, "\x1b\x07\u202e") {
		t.Fatalf("page holds a raw control or bidi character:\n%q", body)
	}
	if !strings.Contains(body, `\u001b[2J`) {
		t.Fatalf("page does not show the escaped id:\n%s", body)
	}
}
