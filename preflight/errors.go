package preflight

import (
	"errors"
	"strconv"
)

var (
	// ErrNilRequest reports an Evaluate call without a request to evaluate.
	ErrNilRequest = errors.New("preflight: nil request")
	// ErrNoChainResolver is the resolver error of decision_chain_complete
	// when the verifier was built without a ChainResolver: the chain cannot
	// be checked, so the decision fails closed.
	ErrNoChainResolver = errors.New("preflight: no chain resolver configured")
)

// RequestError is why a PreflightRequest body could not be decoded. Path is
// a JSON Pointer into the body ("" for the whole document), so the HTTP
// layer can put it in the error body as is.
type RequestError struct {
	Code    string `json:"code"`
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Error returns the code, the path and the message.
func (e *RequestError) Error() string {
	return "preflight: " + e.Code + " at " + strconv.Quote(e.Path) + ": " + e.Message
}

func malformed(path, message string) *RequestError {
	return &RequestError{Code: CodeMalformedRequest, Path: path, Message: message}
}
