package clause

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrInvalidClause is matched (errors.Is) by every *CompileError, for
	// callers that only need to know the bundle's clauses did not compile.
	ErrInvalidClause = errors.New("clause: invalid clause")
)

// Problem is one clause that failed to compile or type-check.
type Problem struct {
	Kind       string // capability kind
	Clause     string // "preconditions", "invariants" or "postconditions"
	Index      int    // position in the declared list
	Expression string
	Line       int // 1-based; 0 when CEL gave no position
	Column     int // 1-based, as CEL displays it
	Message    string
}

// String names the problem the way an operator looks for it in the bundle:
// capability "refund.create.v2": preconditions[1] at 1:8: <message>.
func (p Problem) String() string {
	if p.Line <= 0 {
		return fmt.Sprintf("capability %q: %s[%d]: %s", p.Kind, p.Clause, p.Index, p.Message)
	}
	return fmt.Sprintf("capability %q: %s[%d] at %d:%d: %s", p.Kind, p.Clause, p.Index, p.Line, p.Column, p.Message)
}

// CompileError lists every clause problem in a bundle, so one startup run
// shows them all rather than the first.
type CompileError struct {
	Problems []Problem // sorted by kind, clause, index, position
}

// Error joins the problems on one line, so it survives structured logging.
func (e *CompileError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	noun := "clauses"
	if len(e.Problems) == 1 {
		noun = "clause"
	}
	return fmt.Sprintf("clause: %d invalid %s: %s", len(e.Problems), noun, strings.Join(parts, "; "))
}

// Is reports ErrInvalidClause as the error's kind.
func (e *CompileError) Is(target error) bool {
	return target == ErrInvalidClause
}
