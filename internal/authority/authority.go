// Package authority holds the one rule for the names an approval is given
// under: the roles of a token entry, the authorities of a capability's
// approval block and an envelope's authorityRefs. A token can approve a
// step only when one of its roles equals one of the step's authorities,
// byte for byte, so a name that one list takes and another refuses would
// make a step nobody can approve.
package authority

import "strings"

// ListProblem returns the index of the first name in names that cannot be
// matched, and why: an empty name, one that starts or ends with white
// space, or one listed twice; -1 and "" when every name is usable.
func ListProblem(names []string) (int, string) {
	seen := make(map[string]bool, len(names))
	for i, n := range names {
		switch {
		case strings.TrimSpace(n) == "":
			return i, "is empty"
		case strings.TrimSpace(n) != n:
			return i, "starts or ends with white space"
		case seen[n]:
			return i, "is listed twice"
		}
		seen[n] = true
	}
	return -1, ""
}
