package toolruntime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
)

// DefaultMaxBodyBytes is the body limit when Options.MaxBodyBytes is zero.
// It matches the 1 MiB Envoy buffers for ext_authz, so a body the gate could
// see whole is never refused here.
const DefaultMaxBodyBytes = 1 << 20

// Header names the runtime reads from a gated request. Envoy adds the audit id
// and the advisory reason on allow; the other two come from the caller.
const (
	HeaderAuditID        = "X-Autonomy-Audit-Id"
	HeaderAdvisoryReason = "X-Autonomy-Advisory-Reason"
	HeaderPreflightID    = "X-Autonomy-Preflight-Id"
	HeaderRequestID      = "X-Request-Id"
	// HeaderToolKind carries the kind to a check that never sees the body
	// (nginx auth_request, docs/DEPLOY.md section 3): a call whose body
	// names another kind than the header the check judged is refused.
	HeaderToolKind        = "X-Autonomy-Tool-Kind"
	statusClientCancelled = 499 // nginx's code for a client that went away; only ever logged
)

// Error codes in the JSON error body.
const (
	CodeUnknownTool      = "unknown-tool"
	CodeMalformedRequest = "malformed-request"
	CodeInvalidArgs      = "invalid-args"
	CodeMethodNotAllowed = "method-not-allowed"
	CodeRequestTooLarge  = "request-too-large"
	CodeCancelled        = "cancelled"
	CodeKindMismatch     = "kind-mismatch"
)

// Options configures a Handler. The zero value is usable.
type Options struct {
	// Logger receives one record per tool call. Nil discards them.
	Logger *slog.Logger
	// MaxBodyBytes caps the request body; zero means DefaultMaxBodyBytes.
	MaxBodyBytes int64
}

// Handler serves POST /v1/tool and GET /healthz.
type Handler struct {
	logger  *slog.Logger
	maxBody int64
	tools   map[string]toolFunc
	mux     *http.ServeMux
}

var _ http.Handler = (*Handler)(nil)

// New returns a Handler for the built-in example tools.
func New(opts Options) *Handler {
	h := &Handler{
		logger:  opts.Logger,
		maxBody: opts.MaxBodyBytes,
		tools:   builtinTools(),
		mux:     http.NewServeMux(),
	}
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	if h.maxBody <= 0 {
		h.maxBody = DefaultMaxBodyBytes
	}
	// /v1/tool is registered without a method so that a wrong method still
	// reaches handleTool and is logged: the log is the record of what got
	// past the gate, whatever the method.
	h.mux.HandleFunc("/v1/tool", h.handleTool)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return h
}

// Kinds returns the tool kinds the handler serves, sorted.
func (h *Handler) Kinds() []string {
	return slices.Sorted(maps.Keys(h.tools))
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

// toolRequest is the body of POST /v1/tool.
type toolRequest struct {
	Kind string          `json:"kind"`
	Args json.RawMessage `json:"args"`
}

func (h *Handler) handleTool(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, h.maxBody)
	kind, status, body := h.call(r)
	if echoed := r.Header.Get(HeaderAuditID); echoed != "" {
		// Echoed so a client behind Envoy can join its call to the audit
		// trail: Envoy adds the header upstream only.
		w.Header().Set(HeaderAuditID, echoed)
	}
	// Logged before the answer is written, so that once a client has its
	// response the log line is already on disk for whoever reads it.
	h.logCall(r, kind, status)
	if status == statusClientCancelled {
		return
	}
	writeJSON(w, status, body)
}

// call runs the request and returns the kind it named ("" if none could be
// read), the HTTP status and the body to send.
func (h *Handler) call(r *http.Request) (string, int, any) {
	if r.Method != http.MethodPost {
		return "", http.StatusMethodNotAllowed, errorBody(CodeMethodNotAllowed, "use POST")
	}
	req, err := decodeToolRequest(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return "", http.StatusRequestEntityTooLarge, errorBody(CodeRequestTooLarge, "body over the limit")
		}
		return req.Kind, http.StatusBadRequest, errorBody(CodeMalformedRequest, err.Error())
	}
	if hk := r.Header.Values(HeaderToolKind); len(hk) > 0 && (len(hk) > 1 || hk[0] != req.Kind) {
		return req.Kind, http.StatusBadRequest, errorBody(CodeKindMismatch,
			"the body's kind "+req.Kind+" is not the "+HeaderToolKind+" the check was given")
	}
	tool, ok := h.tools[req.Kind]
	if !ok {
		return req.Kind, http.StatusNotFound, errorBody(CodeUnknownTool, "no tool of kind "+req.Kind)
	}
	args, err := decodeArgs(req.Args)
	if err != nil {
		return req.Kind, http.StatusBadRequest, errorBody(CodeMalformedRequest, err.Error())
	}
	result, err := tool(r.Context(), args)
	if err != nil {
		var te *toolError
		switch {
		case errors.As(err, &te):
			return req.Kind, te.status, errorBody(te.code, te.message)
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			return req.Kind, statusClientCancelled, errorBody(CodeCancelled, err.Error())
		default:
			return req.Kind, http.StatusInternalServerError, errorBody("internal", err.Error())
		}
	}
	return req.Kind, http.StatusOK, result
}

func (h *Handler) logCall(r *http.Request, kind string, status int) {
	level := slog.LevelInfo
	if status >= http.StatusInternalServerError {
		level = slog.LevelError
	}
	// The attribute keys are the header names, lower case, so a reader can
	// grep the log for exactly what the gate sent.
	h.logger.LogAttrs(r.Context(), level, "tool call",
		slog.String("method", r.Method),
		slog.String("kind", kind),
		slog.Int("status", status),
		slog.String("x-autonomy-audit-id", r.Header.Get(HeaderAuditID)),
		slog.String("x-request-id", r.Header.Get(HeaderRequestID)),
		slog.String("x-autonomy-preflight-id", r.Header.Get(HeaderPreflightID)),
		slog.String("x-autonomy-advisory-reason", r.Header.Get(HeaderAdvisoryReason)),
	)
}

// decodeToolRequest reads one JSON object with a non-empty string kind. It
// returns whatever kind it managed to read alongside an error, for the log.
func decodeToolRequest(body io.Reader) (toolRequest, error) {
	var req toolRequest
	dec := json.NewDecoder(body)
	if err := dec.Decode(&req); err != nil {
		return req, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return req, err
		}
		return req, errors.New("trailing data after the JSON object")
	}
	if req.Kind == "" {
		return req, errors.New("kind is required")
	}
	return req, nil
}

// decodeArgs returns the args object, keeping numbers as json.Number so that
// a receipt digest sees the number the caller wrote. Absent or null args are
// an empty object.
func decodeArgs(raw json.RawMessage) (map[string]any, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return map[string]any{}, nil
	}
	if trimmed[0] != '{' {
		return nil, errors.New("args must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	var args map[string]any
	if err := dec.Decode(&args); err != nil {
		return nil, err
	}
	return args, nil
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func errorBody(code, message string) any {
	return map[string]errorDetail{"error": {Code: code, Message: message}}
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// An encode error here means the client went away mid-write; there is
	// no one left to tell.
	_ = json.NewEncoder(w).Encode(body)
}
