package explain

import (
	"bytes"
	"context"
	"embed"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"strings"

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

// Store reads the audit join; *wal.DB implements it.
type Store interface {
	AuditFrames(ctx context.Context, auditID string) ([]wal.Frame, error)
}

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
		h.message(w, http.StatusUnauthorized, "Not authorized",
			"Reading audit records needs a valid bearer token (access.tokens_file), the same as GET /v1/audit.")
		return
	}
	frames, err := h.o.Store.AuditFrames(r.Context(), id)
	if err != nil {
		h.o.Logger.Error("explain page cannot read the audit join", "audit_id", id, "err", err)
		h.message(w, http.StatusServiceUnavailable, "Audit log unavailable",
			"The write-ahead log could not be read just now. Try again shortly.")
		return
	}
	if !all && !inTenant(frames, tenant) {
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
	h.render(w, http.StatusOK, "page.html", page)
}

// inTenant applies GET /v1/audit's rule: an audit id belongs to the tenant
// of its preflight; one without a preflight belongs to no tenant.
func inTenant(frames []wal.Frame, tenant string) bool {
	for _, f := range frames {
		if f.Kind != wal.KindPreflight {
			continue
		}
		var t string
		_, err := f.Attr("tenant", &t)
		return err == nil && t == tenant
	}
	return tenant == ""
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
	hdr.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; frame-ancestors 'none'")
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
