package explain_test

import (
	"bytes"
	"context"
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

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
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
	if status, body := postForm(t, base+action, form, map[string]string{"Sec-Fetch-Site": "none"}); status != http.StatusForbidden {
		t.Fatalf("post the browser marks Sec-Fetch-Site: none: %d %s, want 403 (only same-origin posts)", status, body)
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

// TestExplainApprovalFormSubmittedInChromium: an approver opens the page
// in headless Chromium (driven over the DevTools protocol by chromedp),
// types their token into the form, approves, and the browser lands on the
// recorded decision; reloaded, the page's timeline shows the approval, and
// the WAL holds its autonomy.approval frame.
func TestExplainApprovalFormSubmittedInChromium(t *testing.T) {
	chromium := chromiumPath(t)
	base, auditID, preflightID := startApprovalServer(t, true)
	pageURL := base + "/ui/audit/" + auditID

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.UserDataDir(profileDir(t)), chromedp.Flag("disable-quic", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()

	// The page is a read: the browser presents the approver's token as a
	// reader would (a proxy in front could add it just so). The form's
	// token field is what decides; the header alone decides nothing.
	var heading, body, timeline string
	err := chromedp.Run(ctx,
		network.Enable(),
		network.SetExtraHTTPHeaders(network.Headers{"Authorization": "Bearer " + approverToken}),
		chromedp.Navigate(pageURL),
		chromedp.WaitVisible(`form.approval-form`, chromedp.ByQuery),
		chromedp.SendKeys(`form.approval-form input[name="token"]`, approverToken, chromedp.ByQuery),
		chromedp.SetValue(`form.approval-form select[name="decision"]`, "approve", chromedp.ByQuery),
		chromedp.SendKeys(`form.approval-form input[name="comment"]`, "invoice 77 checked in the browser", chromedp.ByQuery),
		chromedp.Click(`form.approval-form button[type="submit"]`, chromedp.ByQuery),
		// The answer is the message page: waiting for its own heading, not
		// any h1, keeps the audit page's from being read before it goes.
		chromedp.WaitVisible(`#message-title`, chromedp.ByQuery),
		chromedp.Text(`#message-title`, &heading, chromedp.ByQuery),
		chromedp.Text(`body`, &body, chromedp.ByQuery),
	)
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if heading != "Step s1 approved" || !strings.Contains(body, auditID) {
		t.Fatalf("after submitting the form the browser shows %q: %s", heading, body)
	}
	var forms int
	err = chromedp.Run(ctx,
		chromedp.Navigate(pageURL),
		chromedp.WaitVisible(`#timeline`, chromedp.ByQuery),
		chromedp.Text(`#timeline li.event.approval`, &timeline, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("form.approval-form").length`, &forms),
	)
	if err != nil {
		t.Fatalf("chromium, reloading the page: %v", err)
	}
	if !strings.Contains(timeline, "approve") || !strings.Contains(timeline, "alice") ||
		!strings.Contains(timeline, "invoice 77 checked in the browser") || forms != 0 {
		t.Fatalf("timeline after the decision %q, %d forms left; want alice's approval and no form", timeline, forms)
	}

	// The WAL has the frame, under the preflight's audit id.
	status, raw := getPage(t, base+"/v1/audit/"+auditID+"?include=approval")
	var join struct {
		Frames []struct {
			Kind  string         `json:"kind"`
			Attrs map[string]any `json:"attrs"`
		} `json:"frames"`
	}
	if status != http.StatusOK || json.Unmarshal(raw, &join) != nil {
		t.Fatalf("audit join: %d %s", status, raw)
	}
	var approvals []map[string]any
	for _, f := range join.Frames {
		if f.Kind == "autonomy.approval" {
			approvals = append(approvals, f.Attrs)
		}
	}
	if len(approvals) != 1 || approvals[0]["decision"] != "approve" || approvals[0]["approver"] != "alice" ||
		approvals[0]["preflight_id"] != preflightID || approvals[0]["step_id"] != "s1" ||
		approvals[0]["comment"] != "invoice 77 checked in the browser" {
		t.Fatalf("approval frames %v, want alice's approval of s1", approvals)
	}
}
