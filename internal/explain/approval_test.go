package explain_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/contractrefine/autonomy/internal/config"
)

const approverToken = "approver-0123456789abcdef0123"

// startApprovalServer runs a real service whose tokens file has an
// approver for the default bundle's payment.send.v1, and records a
// preflight of one payment, which waits for approval.
func startApprovalServer(t *testing.T, withTokens bool) (base, auditID, preflightID string) {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf("tokens:\n  - {name: alice, tenant: \"*\", token: %q, roles: [\"role:payment-approver\"], subject: \"user:alice\"}\n", approverToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", filepath.Join(dir, "data")
	cfg.ContractRefine.Mode = config.ModeEnforce
	if withTokens {
		cfg.Access.TokensFile = tokens
	}
	base = runServer(t, cfg)
	plan := fmt.Sprintf(`{"intent":{"summary":"Pay invoice 77","plan_hash":"plan-explain-pay"},
	  "plan":{"steps":[{"id":"s1","kind":"payment.send.v1","zone":"payments","args":{"to":"acct:77","amountUsd":480},
	    "provenance":{"to":"literal","amountUsd":"literal"}}]},
	  "context":{"actor":{"id":"user:agent","session_id":"session:explain-pay"},
	             "attestation":{"node_id":"edge-7","issued_at":%q}}}`, time.Now().UTC().Format(time.RFC3339))
	status, body := post(t, base+"/v1/preflight", nil, plan)
	var d struct {
		PreflightID string `json:"preflight_id"`
		AuditID     string `json:"audit_id"`
		Outcome     string `json:"outcome"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &d) != nil || d.Outcome != "pass" {
		t.Fatalf("preflight: %d %s", status, body)
	}
	return base, d.AuditID, d.PreflightID
}

func getPage(t *testing.T, url string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+approverToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func postForm(t *testing.T, action string, form url.Values, headers map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, action, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestExplainApprovalForm: the page offers the pending step's form; a
// cross-site post and one without a token record nothing; the approver's
// post records the decision, which the timeline then shows.
func TestExplainApprovalForm(t *testing.T) {
	base, auditID, preflightID := startApprovalServer(t, true)
	pageURL := base + "/ui/audit/" + auditID
	status, raw := getPage(t, pageURL)
	if status != http.StatusOK {
		t.Fatalf("page: %d %s", status, raw)
	}
	doc := parseHTML(t, bytes.NewReader(raw))
	forms := all(byID(doc, "approvals"), tagClass("form", "approval-form"))
	if len(forms) != 1 {
		t.Fatalf("%d approval forms on the page, want 1", len(forms))
	}
	action := attr(forms[0], "action")
	if action != "/ui/approvals/"+preflightID+"/s1" || attr(forms[0], "method") != "post" {
		t.Fatalf("form posts %s to %q", attr(forms[0], "method"), action)
	}
	form := url.Values{"token": {approverToken}, "decision": {"approve"}, "comment": {"invoice checked"}}
	if status, body := postForm(t, base+action, form, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}); status != http.StatusForbidden {
		t.Fatalf("cross-site post: %d %s", status, body)
	}
	if status, body := postForm(t, base+action, url.Values{"decision": {"approve"}}, nil); status != http.StatusUnauthorized {
		t.Fatalf("post without a token: %d %s", status, body)
	}
	if status, body := postForm(t, base+action, form, map[string]string{"Origin": base, "Sec-Fetch-Site": "same-origin"}); status != http.StatusOK || !strings.Contains(body, "approved") {
		t.Fatalf("approver's post: %d %s", status, body)
	}
	if status, body := postForm(t, base+action, form, nil); status != http.StatusConflict || !strings.Contains(body, "approval-already-decided") {
		t.Fatalf("second post: %d %s", status, body)
	}
	_, raw = getPage(t, pageURL)
	doc = parseHTML(t, bytes.NewReader(raw))
	if byID(doc, "approvals") != nil {
		t.Error("the page still offers a form for a decided step")
	}
	events := all(byID(doc, "timeline"), tagClass("li", "event", "approval"))
	if len(events) != 1 || !strings.Contains(text(events[0]), "alice") || !strings.Contains(text(events[0]), "invoice checked") {
		t.Fatalf("%d approval events on the timeline", len(events))
	}
}

// TestExplainApprovalFormInChromium: the browser builds the page with the
// pending step's form, its token field a password field (a service
// without a tokens file serves the page to loopback readers).
func TestExplainApprovalFormInChromium(t *testing.T) {
	chromium := chromiumPath(t)
	base, auditID, preflightID := startApprovalServer(t, false)
	doc := parseHTML(t, bytes.NewReader(runChromium(t, chromium, "--dump-dom", base+"/ui/audit/"+auditID)))
	forms := all(doc, tagClass("form", "approval-form"))
	if len(forms) != 1 || attr(forms[0], "action") != "/ui/approvals/"+preflightID+"/s1" {
		t.Fatalf("%d approval forms in the browser's DOM", len(forms))
	}
	var password, decision bool
	for _, n := range all(forms[0], func(n *html.Node) bool { return n.Type == html.ElementNode }) {
		switch {
		case n.Data == "input" && attr(n, "name") == "token" && attr(n, "type") == "password":
			password = true
		case n.Data == "select" && attr(n, "name") == "decision":
			decision = true
		}
	}
	if !password || !decision {
		t.Fatalf("the form lacks its token field (%v) or its decision (%v)", password, decision)
	}
}
