# The default ContractRefine policy: the operator's last word on every call
# that reaches the gate (SPEC §6). ContractRefine's own checks (the binding
# ladder and the clauses) run before it; this policy runs in every mode.
package autonomy

import rego.v1

default allow := false

# Requests outside the gated tool path carry no tool kind; the gate only
# sees them when a proxy sends everything through it.
allow if input.action.kind == ""

# A tool call is allowed when its kind is a capability the operator listed.
allow if data.autonomy.capabilities[input.action.kind]

deny_reason := "unknown_tool_kind" if {
	input.action.kind != ""
	not data.autonomy.capabilities[input.action.kind]
}
