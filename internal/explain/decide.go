package explain

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
)

// DecidePattern is where the page's approval form posts.
const (
	DecidePathPattern = "/ui/approvals/{preflight_id}/{step_id}"
	DecidePattern     = "POST " + DecidePathPattern
	decidePrefix      = "/ui/approvals/"
)

// maxFormBytes bounds the form: a token, a decision and a comment.
const maxFormBytes = 16 << 10

// DecideHandler serves the approval form's POST: the approver types their
// bearer token into the form, and the decision goes to the approvals API
// with it, so the page decides nothing the API would not. A browser sends
// no token by itself (it is not a cookie), so a page on another site
// cannot make one decide: it would have to know the token. Requests a
// browser marks as cross-site (Sec-Fetch-Site, or an Origin other than
// the page's) are refused before the token is even read.
func (h *Handler) DecideHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.o.Decide == nil {
			h.message(w, http.StatusNotFound, "Not found", "Approvals cannot be decided from this page.")
			return
		}
		if crossSite(r) {
			h.message(w, http.StatusForbidden, "Cross-site request refused",
				"An approval can be decided only from this service's own explain page.")
			return
		}
		ct := strings.TrimSpace(strings.Split(r.Header.Get("Content-Type"), ";")[0])
		if !strings.EqualFold(ct, "application/x-www-form-urlencoded") {
			h.message(w, http.StatusUnsupportedMediaType, "Not a form", "The decision must be sent by the page's form.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			h.message(w, http.StatusBadRequest, "Form unreadable", "The form could not be read.")
			return
		}
		token := strings.TrimSpace(r.PostForm.Get("token"))
		body, _ := json.Marshal(map[string]string{"decision": r.PostForm.Get("decision"), "comment": r.PostForm.Get("comment")})
		preflightID, stepID := r.PathValue("preflight_id"), r.PathValue("step_id")
		inner := httptest.NewRequestWithContext(r.Context(), http.MethodPost,
			"/v1/approvals/"+url.PathEscape(preflightID)+"/"+url.PathEscape(stepID), bytes.NewReader(body))
		inner.RemoteAddr, inner.Host = r.RemoteAddr, r.Host
		inner.Header.Set("Content-Type", "application/json")
		if token != "" {
			inner.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.o.Decide.ServeHTTP(rec, inner)
		if rec.Code == http.StatusOK {
			var v struct {
				State   string `json:"state"`
				AuditID string `json:"audit_id"`
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &v)
			h.message(w, http.StatusOK, "Step "+stepID+" "+v.State,
				"The decision is recorded under audit id "+v.AuditID+"; reload its explain page to see it on the timeline.")
			return
		}
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		h.message(w, rec.Code, "Not recorded: "+e.Error.Code, e.Error.Message)
	})
}

// crossSite reports whether a browser says r comes from another site.
// Sec-Fetch-Site, which no page can set, decides when the browser sends
// it: the page's own form is same-origin, although its Origin is "null"
// (Chromium sends that for a form posted from a page with
// Referrer-Policy: no-referrer, as the explain page is). Without it, an
// Origin other than the page's host is cross-site.
func crossSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin":
		return false
	case "":
	default:
		// "none" too: a form posted from the page is same-origin.
		return true
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return true
		}
	}
	return false
}
