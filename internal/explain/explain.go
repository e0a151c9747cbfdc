package explain

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/contractrefine/autonomy/internal/display"
	"github.com/contractrefine/autonomy/wal"
)

// PathPattern is the path the page is served under, as a ServeMux
// pattern without a method; Pattern adds it.
const (
	PathPattern = "/ui/audit/{audit_id}"
	Pattern     = "GET " + PathPattern
)

// pathPrefix is Pattern's fixed part, for a handler mounted without it.
const pathPrefix = "/ui/audit/"

// Store reads the audit join and the approvals; *wal.DB implements it.
type Store interface {
	AuditFramesOf(ctx context.Context, auditID string, kinds []string) ([]wal.Frame, error)
	Approval(ctx context.Context, preflightID, stepID string) (wal.Approval, error)
}

// pageKinds are the frames the page shows: the default join, the
// approvals and the tool outcomes.
var pageKinds = []string{wal.KindPreflight, wal.KindDecision, wal.KindApproval, wal.KindOutcome}

var _ Store = (*wal.DB)(nil)

// Access decides who may read stored records, with the same method (and the
// same rule) as the HTTP API's read endpoints: ok false refuses the
// request; all true sees every tenant, else only tenant's records.
type Access interface {
	Authorize(r *http.Request) (tenant string, all bool, ok bool)
}

// Options configures the page. Zero values mean the defaults.
type Options struct {
	// Store is required.
	Store Store
	// Access guards the page like GET /v1/audit. Nil lets everyone read.
	Access Access
	// Logger receives read failures. Nil discards.
	Logger *slog.Logger
	// Decide, when set, is the approvals API (POST /v1/approvals/{id}/{step})
	// the page's approval form is handed to; without it no form is shown.
	Decide http.Handler
	// Now is the clock that tells a pending approval from an expired one.
	Now func() time.Time
}

// Handler serves the explain page.
type Handler struct {
	o    Options
	tmpl *template.Template
}

//go:embed templates/*.html
var templateFS embed.FS

// New returns the page handler. The templates are parsed once, here; they
// are embedded, so a parse failure is a build bug and panics.
func New(o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	tmpl := template.Must(template.New("explain").Funcs(template.FuncMap{
		"short": short,
	}).ParseFS(templateFS, "templates/*.html"))
	return &Handler{o: o, tmpl: tmpl}
}

// ServeHTTP renders the page of the audit id in the path.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("audit_id")
	if id == "" {
		id = strings.TrimPrefix(r.URL.Path, pathPrefix)
	}
	tenant, all, ok := "", true, true
	if h.o.Access != nil {
		tenant, all, ok = h.o.Access.Authorize(r)
	}
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="autonomy"`)
		h.message(w, http.StatusUnauthorized, "Not authorized",
			"Reading audit records needs a valid bearer token (access.tokens_file), the same as GET /v1/audit.")
		return
	}
	frames, err := h.o.Store.AuditFramesOf(r.Context(), id, pageKinds)
	if err != nil {
		h.o.Logger.Error("explain page cannot read the audit join", "audit_id", id, "err", err)
		h.message(w, http.StatusServiceUnavailable, "Audit log unavailable",
			"The write-ahead log could not be read just now. Try again shortly.")
		return
	}
	if !all && !wal.AuditInTenant(frames, tenant) {
		frames = nil
	}
	if len(frames) == 0 {
		h.message(w, http.StatusNotFound, "Audit id not found",
			"No preflight or tool decision is recorded under "+id+". It may never have existed, belong to another tenant, or be older than wal.retention.")
		return
	}
	page, err := BuildPage(id, frames)
	if err != nil {
		h.o.Logger.Error("explain page cannot decode the audit join", "audit_id", id, "err", err)
		h.message(w, http.StatusInternalServerError, "Audit record unreadable", "A frame of this audit id could not be decoded.")
		return
	}
	if err := h.pending(r.Context(), page, frames); err != nil {
		h.o.Logger.Error("explain page cannot read approvals", "audit_id", id, "err", err)
		h.message(w, http.StatusServiceUnavailable, "Approvals unavailable",
			"The approvals of this preflight could not be read just now. Try again shortly.")
		return
	}
	h.render(w, http.StatusOK, "page.html", page)
}

// pending fills in the page's steps that still wait for a decision.
func (h *Handler) pending(ctx context.Context, page *Page, frames []wal.Frame) error {
	if page.Preflight == nil {
		return nil
	}
	now := h.o.Now()
	for i := range frames {
		if frames[i].Kind != wal.KindPreflight {
			continue
		}
		for _, step := range approvalSteps(&frames[i]) {
			a, err := h.o.Store.Approval(ctx, page.Preflight.PreflightID, step)
			if errors.Is(err, wal.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if a.StateAt(now) != wal.ApprovalPending {
				continue
			}
			pa := PendingApproval{PreflightID: a.PreflightID, StepID: a.StepID, ToolKind: a.ToolKind,
				ArgsDigest: a.ArgsDigest, Authorities: a.Authorities, ExpiresAt: a.ExpiresAt.UTC().Format(time.RFC3339)}
			if h.o.Decide != nil {
				pa.Action = decidePrefix + url.PathEscape(a.PreflightID) + "/" + url.PathEscape(a.StepID)
			}
			page.Pending = append(page.Pending, pa)
		}
		break
	}
	return nil
}

type message struct {
	Status  int
	Title   string
	Message string
}

func (h *Handler) message(w http.ResponseWriter, status int, title, msg string) {
	h.render(w, status, "message.html", message{Status: status, Title: title, Message: msg})
}

// render executes the template into a buffer first, so a template error
// becomes a clean 500 rather than half a page.
func (h *Handler) render(w http.ResponseWriter, status int, name string, data any) {
	var buf bytes.Buffer
	if err := h.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		h.o.Logger.Error("explain page template failed", "template", name, "err", err)
		http.Error(w, "explain page template failed", http.StatusInternalServerError)
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	// No scripts, no outside assets: the policy says so to the browser too.
	// The one form (an approval's) posts to this origin only.
	hdr.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	hdr.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	// html/template escapes markup, not control or bidi characters: the
	// page is read with curl too, and an agent's escape sequences must not
	// reach a terminal, nor an override reorder what a browser shows.
	w.Write([]byte(display.Page(buf.String())))
}

// short trims a long id or hash for a table cell; the full value stays in
// the title attribute.
func short(s string) string {
	if len(s) <= 24 {
		return s
	}
	return s[:20] + "…"
}
