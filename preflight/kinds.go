package preflight

import "fmt"

// KindRule is the shape plan step kinds and capability names must have:
// the gate's protocol decides it (gate.protocol).
type KindRule int

// The kind rules.
const (
	// KindRuleTool is the rule of the /v1/tool protocol: ^[a-z][a-z0-9_.-]*$.
	KindRuleTool KindRule = iota
	// KindRuleMCP is MCP's tool-name rule: ^[A-Za-z0-9_.-]{1,128}$. An MCP
	// tools/call names its tool in params.name, and the gate takes that
	// name as the kind, so a plan step must be able to name any MCP tool.
	KindRuleMCP
)

// MaxMCPToolName is the longest tool name MCP allows.
const MaxMCPToolName = 128

// Valid reports whether kind follows the rule.
func (r KindRule) Valid(kind string) bool {
	if r == KindRuleMCP {
		return validMCPToolName(kind)
	}
	return validKind(kind)
}

// Pattern is the rule as a regular expression, for messages.
func (r KindRule) Pattern() string {
	if r == KindRuleMCP {
		return fmt.Sprintf("^[A-Za-z0-9_.-]{1,%d}$", MaxMCPToolName)
	}
	return "^[a-z][a-z0-9_.-]*$"
}

// validMCPToolName reports whether name matches ^[A-Za-z0-9_.-]{1,128}$.
func validMCPToolName(name string) bool {
	if name == "" || len(name) > MaxMCPToolName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}
