package submit

import "strings"

// Error is why a submission got no decision, its codes those of the
// catalog (preflight.Code*): the HTTP status it is
// answered with, whether a retry may succeed, and one Field per problem
// (the first the main one). Err is the cause of a 503, for the log only.
type Error struct {
	Status    int
	Retryable bool
	Fields    []Field
	Err       error
}

// Field is one problem: its code, the JSON Pointer of the member it is
// about ("" for the whole request) and a message for people.
type Field struct {
	Code    string
	Path    string
	Message string
}

// Code is the main problem's code.
func (e *Error) Code() string { return e.Fields[0].Code }

// Error returns the codes, paths and messages.
func (e *Error) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Code + " at " + f.Path + ": " + f.Message
	}
	s := "preflight: " + strings.Join(parts, "; ")
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func fieldError(status int, code, path, message string) *Error {
	return &Error{Status: status, Fields: []Field{{Code: code, Path: path, Message: message}}}
}
