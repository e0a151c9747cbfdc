package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/envelope"
)

// Answer details; the error codes are the catalog's (preflight.Code*).
const (
	headerIdempotentReplayed    = "Idempotent-Replayed"
	contentTypeJSON             = "application/json"
	contentTypeJSONWithCharset  = "application/json; charset=utf-8"
	maxErrorsListed             = 100
	retryAfterUnavailableSecond = "1"
)

// apiError is one entry of the error body.
type apiError struct {
	Code              string   `json:"code"`
	ContractVersion   string   `json:"contractVersion,omitempty"`
	Path              string   `json:"path"`
	Message           string   `json:"message"`
	Retryable         bool     `json:"retryable"`
	SupportedVersions []string `json:"supportedVersions,omitempty"`
}

type errorBody struct {
	Error  apiError   `json:"error"`
	Errors []apiError `json:"errors"`
}

// writeErrors answers status with the first error in "error" and all of
// them in "errors".
func writeErrors(w http.ResponseWriter, status int, errs []apiError) {
	if len(errs) > maxErrorsListed {
		errs = errs[:maxErrorsListed]
	}
	for i := range errs {
		errs[i].ContractVersion = envelope.ContractVersion
		errs[i].SupportedVersions = envelope.SupportedVersions
	}
	b, _ := json.Marshal(errorBody{Error: errs[0], Errors: errs})
	w.Header().Set("Content-Type", contentTypeJSON)
	if status == http.StatusUnauthorized {
		// RFC 9110 §11.6.1: a 401 names the scheme it wants.
		w.Header().Set("WWW-Authenticate", wwwAuthenticate)
	}
	// A 503 passes when the store or the verifier answers again; a
	// service whose preflight is disabled by its mode does not change
	// until it is reconfigured, so a retry would only meet it again.
	if passes(status, errs[0].Code) {
		w.Header().Set("Retry-After", retryAfterUnavailableSecond)
	}
	w.WriteHeader(status)
	w.Write(b)
}

func writeError(w http.ResponseWriter, status int, code, path, message string, retryable bool) {
	writeErrors(w, status, []apiError{{Code: code, Path: path, Message: message, Retryable: retryable}})
}

// WriteMethodNotAllowed answers 405 for r's method, naming the methods the
// path takes in Allow.
func WriteMethodNotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	WriteError(w, http.StatusMethodNotAllowed, preflight.CodeMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
}

// wwwAuthenticate is the challenge of every 401: a bearer token from
// access.tokens_file.
const wwwAuthenticate = `Bearer realm="autonomy"`

// WriteError answers status with one error about the whole request (path
// ""), in the same body as this package's own errors. It is for handlers
// in front of the API, such as internal/access. The error is retryable
// when it is a 503 that passes by itself (writeErrors sends Retry-After
// with it): the same request may be sent again.
func WriteError(w http.ResponseWriter, status int, code, message string) {
	writeError(w, status, code, "", message, passes(status, code))
}

// passes reports whether an error goes away without the caller changing
// anything: a 503 other than a disabled preflight, which lasts until the
// service is reconfigured.
func passes(status int, code string) bool {
	return status == http.StatusServiceUnavailable && code != preflight.CodePreflightDisabled
}
