package envelope

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// Messages are safe to show to the caller: they name fields of the contract
// and the values the contract allows, never a value taken from the request,
// which may carry data the caller should not see echoed into logs.
const (
	msgNotJSON         = "The request envelope is not valid JSON."
	msgNotObject       = "The request envelope must be a JSON object."
	msgNumberRange     = "The number is outside the supported range."
	msgNumberInexact   = "The number does not round-trip through a double (an integer beyond 2^53 or more digits than a double holds): send it as a string."
	msgDuplicateMember = "The member name appears more than once in its object."
	msgCaseOnlyMember  = "The member name differs from another of its object only in letter case."
	msgDeadlineBefore  = "deadlineUtc must not be earlier than timestampUtc."
	msgTimestampFormat = "%s must be an RFC 3339 UTC timestamp ending in Z."
	// msgApprovalAuthorities: mode always with requiredFor names approvals
	// that nobody could give.
	msgApprovalName        = "%s[%d] %s."
	msgApprovalAuthorities = "authorityRefs must name at least one authority when mode is always and requiredFor is not empty."
)

// requiredMessages explains each required top-level field in the caller's
// terms; the idempotency key's wording is the one the runtime-request contract
// shows in its example error.
var requiredMessages = map[string]string{
	"contractVersion":       "A contract version is required.",
	"requestId":             "A request ID is required.",
	"correlationId":         "A correlation ID is required.",
	"idempotencyKey":        "A stable idempotency key is required.",
	"timestampUtc":          "A UTC request timestamp is required.",
	"actor":                 "An actor reference is required.",
	"taskType":              "A task type is required.",
	"riskLevel":             "A risk level is required.",
	"input":                 "A task input object is required.",
	"permissions":           "A permissions list is required.",
	"contextPolicy":         "A context policy is required.",
	"modelRouteConstraints": "Model route constraints are required.",
	"toolPolicy":            "A tool policy is required.",
	"memoryPolicy":          "A memory policy is required.",
	"budget":                "A budget is required.",
	"approvalPolicy":        "An approval policy is required.",
	"outputContract":        "An output contract is required.",
	"traceSettings":         "Trace settings are required.",
	"dataClassification":    "A data classification is required.",
	"retentionPolicy":       "A retention policy is required.",
}

// requiredMessage is the message for a missing member; tokens locate it.
func requiredMessage(tokens []string) string {
	if len(tokens) == 1 {
		if msg, ok := requiredMessages[tokens[0]]; ok {
			return msg
		}
	}
	return displayName(tokens) + " is required."
}

// kindMessage turns one schema failure at tokens into a message.
func kindMessage(tokens []string, k jsonschema.ErrorKind) string {
	name := displayName(tokens)
	switch k := k.(type) {
	case *kind.Type:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = article(w)
		}
		return fmt.Sprintf("%s must be %s.", name, strings.Join(want, " or "))
	case *kind.Const:
		return fmt.Sprintf("%s must be %v.", name, k.Want)
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = fmt.Sprint(w)
		}
		return fmt.Sprintf("%s must be one of: %s.", name, strings.Join(want, ", "))
	case *kind.MinLength:
		return name + " must not be empty."
	case *kind.Minimum:
		if k.Want.Sign() == 0 {
			return name + " must not be negative."
		}
		return fmt.Sprintf("%s must be at least %s.", name, ratString(k.Want))
	case *kind.Pattern:
		if isTimestampField(tokens) {
			return fmt.Sprintf(msgTimestampFormat, name)
		}
		return name + " is not in the expected format."
	default:
		return name + " is invalid."
	}
}

// kindRank orders failures that share a path: the one explaining most wins,
// and a wrong type makes any other complaint about the value moot.
func kindRank(k jsonschema.ErrorKind) int {
	switch k.(type) {
	case *kind.Type:
		return rankType
	case *kind.Const, *kind.Enum:
		return rankValue
	default:
		return rankOther
	}
}

// Ranks, lowest first: what the reader found before the schema ran, then
// the schema's verdicts, then the checks in code.
const (
	rankDecode = iota
	rankType
	rankValue
	rankOther
	rankCode
)

// displayName names a location for a message: members joined by dots,
// array positions in brackets ("permissions[0]", "toolPolicy.maxCalls").
func displayName(tokens []string) string {
	if len(tokens) == 0 {
		return "The request envelope"
	}
	var sb strings.Builder
	for i, t := range tokens {
		if i > 0 && isIndex(t) {
			sb.WriteString("[" + t + "]")
			continue
		}
		if i > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(t)
	}
	return sb.String()
}

func isIndex(t string) bool {
	_, err := strconv.Atoi(t)
	return err == nil && !strings.HasPrefix(t, "+") && !strings.HasPrefix(t, "-")
}

func isTimestampField(tokens []string) bool {
	return len(tokens) == 1 && (tokens[0] == "timestampUtc" || tokens[0] == "deadlineUtc")
}

func article(jsonType string) string {
	switch jsonType {
	case "null":
		return "null"
	case "object", "array", "integer":
		return "an " + jsonType
	default:
		return "a " + jsonType
	}
}

func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	return r.FloatString(6)
}
