package access

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"golang.org/x/net/http/httpguts"
	"gopkg.in/yaml.v3"

	"github.com/contractrefine/autonomy/internal/authority"
	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/httpapi"
	"github.com/contractrefine/autonomy/preflight"
)

var (
	// ErrNoTokens reports a tokens file that lists no token.
	ErrNoTokens = errors.New("access: the tokens file lists no token")
	// ErrBadToken reports a token entry that cannot be used.
	ErrBadToken = errors.New("access: bad token entry")
)

// AllTenants is the tenant scope of a token that may read every tenant.
const AllTenants = "*"

// MinTokenLength is the shortest token accepted: shorter ones can be guessed.
const MinTokenLength = 16

// Token is one configured token, held as its digest.
type Token struct {
	// Name identifies the entry in logs; it is never the token.
	Name string
	// Tenant is the tenant the token may read, or AllTenants.
	Tenant string
	// Roles are the authorities the token's holder has, matched against
	// the authorities of a step that waits for approval.
	Roles []string
	// Subject is the holder's actor id: an approver whose subject is the
	// preflight's actor may not approve its own step.
	Subject string
	digest  [sha256.Size]byte
}

// NewToken returns the entry for a plaintext token.
func NewToken(name, tenant, token string) (Token, error) {
	if len(token) < MinTokenLength {
		return Token{}, fmt.Errorf("%w: %s: token shorter than %d characters", ErrBadToken, name, MinTokenLength)
	}
	// A bearer token is sent in a header, whose value is trimmed of white
	// space at its ends and cannot carry control characters: such a token
	// could never be presented.
	if strings.TrimSpace(token) != token || !httpguts.ValidHeaderFieldValue(token) {
		return Token{}, fmt.Errorf("%w: %s: token starts or ends with white space or holds a control character, which no request can send", ErrBadToken, name)
	}
	if tenant == "" {
		return Token{}, fmt.Errorf("%w: %s: tenant is required (%q for every tenant)", ErrBadToken, name, AllTenants)
	}
	return Token{Name: name, Tenant: tenant, digest: sha256.Sum256([]byte(token))}, nil
}

// fileEntry is one entry of the tokens file. Either token (the secret
// itself) or sha256 (its lowercase hex digest, so the file need not hold
// the secret) is given.
type fileEntry struct {
	Name    string   `yaml:"name"`
	Token   string   `yaml:"token"`
	SHA256  string   `yaml:"sha256"`
	Tenant  string   `yaml:"tenant"`
	Roles   []string `yaml:"roles"`
	Subject string   `yaml:"subject"`
}

// Parse reads a tokens file:
//
//	tokens:
//	  - name: ops            # for logs
//	    tenant: "*"          # every tenant
//	    token: "…"           # the bearer token, at least 16 characters
//	  - name: acme-audit
//	    tenant: acme         # the envelope's tenantIdRef
//	    sha256: "9f86d0…"    # or the hex SHA-256 of the token instead
//	  - name: alice
//	    tenant: acme
//	    token: "…"
//	    roles: ["role:refund-approver"]   # authorities for approvals
//	    subject: "user:alice"             # the holder's actor id
//
// Unknown keys, entries without a tenant, duplicate names or tokens, an
// empty or repeated role, a subject with white space at an end, a
// token that no request could send (white space at an end, a control
// character), an empty list and a second YAML document with content are
// errors.
func Parse(r io.Reader) ([]Token, error) {
	var doc struct {
		Tokens []fileEntry `yaml:"tokens"`
	}
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("access: %w", config.DecodeError(err, &doc))
	}
	// A second document ("---") would otherwise be dropped unread, with
	// the tokens it lists.
	if err := config.NoMoreDocuments(dec); errors.Is(err, config.ErrMoreDocuments) {
		return nil, errors.New("access: the tokens file holds more than one YAML document; list every token under the first one's tokens")
	} else if err != nil {
		return nil, fmt.Errorf("access: %w", err)
	}
	if len(doc.Tokens) == 0 {
		return nil, ErrNoTokens
	}
	out := make([]Token, 0, len(doc.Tokens))
	names := map[string]bool{}
	digests := map[[sha256.Size]byte]bool{}
	for i, e := range doc.Tokens {
		if e.Name == "" {
			e.Name = fmt.Sprintf("tokens[%d]", i)
		}
		if names[e.Name] {
			return nil, fmt.Errorf("%w: %s: duplicate name", ErrBadToken, e.Name)
		}
		names[e.Name] = true
		var tok Token
		switch {
		case e.Token != "" && e.SHA256 != "":
			return nil, fmt.Errorf("%w: %s: give token or sha256, not both", ErrBadToken, e.Name)
		case e.Token != "":
			t, err := NewToken(e.Name, e.Tenant, e.Token)
			if err != nil {
				return nil, err
			}
			tok = t
		case e.SHA256 != "":
			d, err := hex.DecodeString(e.SHA256)
			if err != nil || len(d) != sha256.Size {
				return nil, fmt.Errorf("%w: %s: sha256 is not 64 hex digits", ErrBadToken, e.Name)
			}
			if e.Tenant == "" {
				return nil, fmt.Errorf("%w: %s: tenant is required (%q for every tenant)", ErrBadToken, e.Name, AllTenants)
			}
			tok = Token{Name: e.Name, Tenant: e.Tenant}
			copy(tok.digest[:], d)
		default:
			return nil, fmt.Errorf("%w: %s: token or sha256 is required", ErrBadToken, e.Name)
		}
		if err := checkIdentity(&e); err != nil {
			return nil, err
		}
		tok.Roles, tok.Subject = e.Roles, e.Subject
		if digests[tok.digest] {
			return nil, fmt.Errorf("%w: %s: the same token is listed twice", ErrBadToken, e.Name)
		}
		digests[tok.digest] = true
		out = append(out, tok)
	}
	return out, nil
}

// checkIdentity validates an entry's roles and subject.
func checkIdentity(e *fileEntry) error {
	if i, problem := authority.ListProblem(e.Roles); problem != "" {
		return fmt.Errorf("%w: %s: roles[%d] %q %s", ErrBadToken, e.Name, i, e.Roles[i], problem)
	}
	if strings.TrimSpace(e.Subject) != e.Subject {
		return fmt.Errorf("%w: %s: subject starts or ends with white space", ErrBadToken, e.Name)
	}
	return nil
}

// LoadFile reads the tokens file at path.
func LoadFile(path string) ([]Token, error) {
	// A file anyone may write lets anyone add a token for every tenant.
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o002 != 0 {
		return nil, fmt.Errorf("access.tokens_file %s: writable by every user (mode %v); chmod o-w it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("access.tokens_file: %w", err)
	}
	toks, err := Parse(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("access.tokens_file %s: %w", path, err)
	}
	return toks, nil
}

// Options configures a Guard. The zero value lets loopback clients read
// everything and nobody else read anything.
type Options struct {
	// Tokens, when not empty, are required for every read.
	Tokens []Token
	// AllowRemoteReads opens the read endpoints to every client when no
	// tokens are configured (access.allow_remote_reads).
	AllowRemoteReads bool
	// ReadPrefixes are the path prefixes of the read endpoints guarded for
	// GET and HEAD. Nil means DefaultReadPrefixes.
	ReadPrefixes []string
	// Logger receives one line per refused read. Nil discards.
	Logger *slog.Logger
	// OnRefusal, when set, is called with the error code of every refused
	// read (the service counts them in autonomy_errors_total).
	OnRefusal func(code string)
}

// DefaultReadPrefixes are the read endpoints of docs/SECURITY.md and the explain pages.
var DefaultReadPrefixes = []string{"/v1/preflight/", "/v1/audit/", "/v1/approvals", "/ui/"}

// Guard implements httpapi.Access and guards the read endpoints.
type Guard struct {
	o Options
}

// New returns a Guard.
func New(o Options) *Guard {
	if o.ReadPrefixes == nil {
		o.ReadPrefixes = DefaultReadPrefixes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Guard{o: o}
}

// TokensConfigured reports whether reads need a token.
func (g *Guard) TokensConfigured() bool { return len(g.o.Tokens) > 0 }

// Authorize returns the tenant the request may read (docs/SECURITY.md): with tokens,
// the scope of the bearer token it carries, ok false without a valid one;
// without tokens, every tenant for a local client (or anyone, with
// AllowRemoteReads).
func (g *Guard) Authorize(r *http.Request) (tenant string, all bool, ok bool) {
	if len(g.o.Tokens) == 0 {
		return "", true, g.o.AllowRemoteReads || Local(r)
	}
	tok, found := g.match(bearer(r))
	if !found {
		return "", false, false
	}
	return tok.Tenant, tok.Tenant == AllTenants, true
}

// Approver returns who the request's bearer token names, for the approvals
// API: ok is false without a valid token. Without a tokens file nobody is
// an approver, since no role can be told.
func (g *Guard) Approver(r *http.Request) (httpapi.Approver, bool) {
	tok, found := g.match(bearer(r))
	if !found {
		return httpapi.Approver{}, false
	}
	return httpapi.Approver{Name: tok.Name, Tenant: tok.Tenant, All: tok.Tenant == AllTenants,
		Roles: tok.Roles, Subject: tok.Subject}, true
}

// match finds the token whose digest is the presented token's. Every entry
// is compared, whether or not an earlier one matched, so the time taken does
// not depend on which entry matches.
func (g *Guard) match(presented string) (Token, bool) {
	if presented == "" {
		return Token{}, false
	}
	d := sha256.Sum256([]byte(presented))
	found := -1
	for i := range g.o.Tokens {
		eq := subtle.ConstantTimeCompare(d[:], g.o.Tokens[i].digest[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return Token{}, false
	}
	return g.o.Tokens[found], true
}

// bearer returns the token of an "Authorization: Bearer <token>" header;
// none when the header is sent twice, as which one counts would then be
// up to each proxy on the way.
func bearer(r *http.Request) string {
	values := r.Header.Values("Authorization")
	if len(values) != 1 {
		return ""
	}
	scheme, tok, ok := strings.Cut(values[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// Local reports whether the request came from this host: over a Unix
// socket, or over loopback naming a loopback host. A web page in a browser
// on this host that points its own name at 127.0.0.1 (DNS rebinding)
// connects over loopback but still names its own host, so it is not local.
func Local(r *http.Request) bool {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && a.Network() == "unix" {
		return true
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback() && loopbackName(r.Host) && !proxied(r)
}

// proxied reports whether r says it passed through a proxy: a proxy on this
// host connects over loopback for every client it serves, and one that
// keeps the client's Host would otherwise pass them all for local.
func proxied(r *http.Request) bool {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Real-Ip", "Via"} {
		if _, ok := r.Header[h]; ok {
			return true
		}
	}
	return false
}

// loopbackName reports whether a Host header names this host over
// loopback: localhost, a name under .localhost, or a loopback address; an
// absent one (HTTP/1.0) too, but not a port with no host (":8181").
func loopbackName(hostport string) bool {
	if hostport == "" {
		return true
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Handler guards next: a GET or HEAD under a read prefix needs a valid
// token when tokens are configured (401 unauthorized), or a local client
// when they are not and remote reads are closed (403
// remote-reads-forbidden). Everything else passes through untouched. The
// tenant scoping itself is done by the handlers, through Authorize.
func (g *Guard) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.isRead(r) {
			next.ServeHTTP(w, r)
			return
		}
		if len(g.o.Tokens) == 0 {
			if g.o.AllowRemoteReads || Local(r) {
				next.ServeHTTP(w, r)
				return
			}
			g.o.Logger.Warn("read refused: remote client and no access tokens configured",
				"remote_addr", r.RemoteAddr, "path", r.URL.Path)
			g.refused(preflight.CodeRemoteReadsForbidden)
			httpapi.WriteError(w, http.StatusForbidden, preflight.CodeRemoteReadsForbidden,
				"Reads are served to loopback clients only; configure access.tokens_file or access.allow_remote_reads.")
			return
		}
		if _, found := g.match(bearer(r)); !found {
			g.o.Logger.Warn("read refused: no valid bearer token", "remote_addr", r.RemoteAddr,
				"path", r.URL.Path, "authorization_present", r.Header.Get("Authorization") != "")
			g.refused(preflight.CodeUnauthorized)
			w.Header().Set("WWW-Authenticate", `Bearer realm="autonomy"`)
			httpapi.WriteError(w, http.StatusUnauthorized, preflight.CodeUnauthorized, "A valid bearer token is required.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (g *Guard) refused(code string) {
	if g.o.OnRefusal != nil {
		g.o.OnRefusal(code)
	}
}

func (g *Guard) isRead(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	for _, p := range g.o.ReadPrefixes {
		if strings.HasPrefix(r.URL.Path, p) {
			return true
		}
	}
	return false
}
