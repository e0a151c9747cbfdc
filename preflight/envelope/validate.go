package envelope

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/contractrefine/autonomy/internal/authority"
	"github.com/contractrefine/autonomy/internal/jsonptr"
)

//go:embed schema/runtime-request.v1.schema.json
var schemaJSON []byte

// schemaID is the $id of the embedded schema; the compiler is handed the
// document under this name so it never tries to fetch anything.
const schemaID = "https://schemas.contractrefine.dev/aruntime/runtime-request.v1.schema.json"

// compiledSchema compiles the embedded schema once, on first use. A schema
// that does not compile is a defect of this package, caught by its tests,
// so it panics instead of failing every request one at a time.
var compiledSchema = sync.OnceValue(func() *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		panic(fmt.Sprintf("envelope: parse embedded schema: %v", err))
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemaID, doc); err != nil {
		panic(fmt.Sprintf("envelope: add embedded schema: %v", err))
	}
	sch, err := c.Compile(schemaID)
	if err != nil {
		panic(fmt.Sprintf("envelope: compile embedded schema: %v", err))
	}
	return sch
})

// fieldOrder is the order in which the runtime-request contract lists its
// top-level fields. A missing top-level
// field is reported right after the nearest field before it in this table
// that the document has, so errors read in the order the contract lists
// its fields wherever the document leaves a gap.
var fieldOrder = []string{
	"contractVersion", "requestId", "correlationId", "idempotencyKey",
	"timestampUtc", "deadlineUtc", "actor", "tenant", "session", "taskType",
	"riskLevel", "input", "permissions", "contextPolicy",
	"modelRouteConstraints", "allowedTools", "toolPolicy", "memoryPolicy",
	"budget", "approvalPolicy", "outputContract", "traceSettings",
	"dataClassification", "retentionPolicy", "metadata",
}

// Validate checks raw, a complete aruntime.runtime-request.v1 envelope, and
// returns either the Envelope it describes and no errors, or nil and every
// failure found.
//
// Failures carry CodeValidationFailed, a JSON Pointer relative to the
// envelope and a message safe to show the caller, one per path, in the
// order doc.go describes. Input that is not one JSON object yields a
// single failure at "". A contractVersion that is a string but not in
// SupportedVersions yields exactly one failure, CodeUnsupportedVersion at
// "/contractVersion", and nothing else is checked, since the consumer must
// not guess the shape of a version it does not know.
//
// Validate does not look at the clock: whether deadlineUtc has already
// passed is for the caller to decide.
func Validate(raw []byte) (*Envelope, []FieldError) {
	tree, rd, err := decode(raw, nil)
	if err != nil {
		return nil, []FieldError{{Code: CodeValidationFailed, Path: "", Message: msgNotJSON}}
	}
	obj, ok := tree.(map[string]any)
	if !ok {
		return nil, []FieldError{{Code: CodeValidationFailed, Path: "", Message: msgNotObject}}
	}
	if v, ok := obj["contractVersion"].(string); ok && !slices.Contains(SupportedVersions, v) {
		return nil, []FieldError{{
			Code:    CodeUnsupportedVersion,
			Path:    "/contractVersion",
			Message: "Supported contract versions: " + strings.Join(SupportedVersions, ", ") + ".",
		}}
	}

	errs := rd.errs
	errs = appendSchemaErrors(errs, compiledSchema().Validate(obj))
	errs, ts, deadline := appendTimeErrors(errs, obj)
	errs = appendApprovalErrors(errs, obj)
	if len(errs) > 0 {
		return nil, order(raw, errs)
	}
	return build(obj, rd.inputBytes(raw), ts, deadline), nil
}

// appendSchemaErrors flattens the library's error tree into one located
// error per failing leaf, and one per member a "required" finds missing.
func appendSchemaErrors(errs []located, err error) []located {
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return errs
	}
	var walk func(*jsonschema.ValidationError)
	walk = func(v *jsonschema.ValidationError) {
		if len(v.Causes) > 0 {
			for _, c := range v.Causes {
				walk(c)
			}
			return
		}
		if req, ok := v.ErrorKind.(*kind.Required); ok {
			for _, name := range req.Missing {
				tokens := append(slices.Clip(v.InstanceLocation), name)
				errs = append(errs, newLocated(tokens, requiredMessage(tokens), rankOther, true, len(errs)))
			}
			return
		}
		tokens := v.InstanceLocation
		errs = append(errs, newLocated(tokens, kindMessage(tokens, v.ErrorKind), kindRank(v.ErrorKind), false, len(errs)))
	}
	walk(verr)
	return errs
}

// appendTimeErrors applies the timestamp rules a schema cannot state: each
// timestamp must be a real RFC 3339 instant written in UTC with "Z" (the
// schema's pattern cannot tell 2026-02-30 from a date), and the deadline
// must not come before the request. It returns the parsed instants; the
// deadline is the zero time when absent.
func appendTimeErrors(errs []located, obj map[string]any) ([]located, time.Time, time.Time) {
	parse := func(name string) (time.Time, bool) {
		s, ok := obj[name].(string)
		if !ok {
			return time.Time{}, false // absent or wrong type: the schema says so
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || !strings.HasSuffix(s, "Z") {
			tokens := []string{name}
			errs = append(errs, newLocated(tokens, fmt.Sprintf(msgTimestampFormat, name), rankCode, false, len(errs)))
			return time.Time{}, false
		}
		return t, true
	}
	ts, tsOK := parse("timestampUtc")
	deadline, deadlineOK := parse("deadlineUtc")
	if tsOK && deadlineOK && deadline.Before(ts) {
		errs = append(errs, newLocated([]string{"deadlineUtc"}, msgDeadlineBefore, rankCode, false, len(errs)))
	}
	return errs, ts, deadline
}

// appendApprovalErrors refuses an approvalPolicy that requires approvals
// nobody may give: mode "always" with classes in requiredFor and no
// authorityRefs. A missing authority is never filled in with a default.
// It also refuses a requiredFor or authorityRefs entry that is empty,
// starts or ends with white space or is listed twice: such a class would
// match no capability's, and such an authority no token's role, so the
// policy would silently ask for no approval, or for one nobody can give.
func appendApprovalErrors(errs []located, obj map[string]any) []located {
	ap, _ := obj["approvalPolicy"].(map[string]any)
	for _, name := range []string{"requiredFor", "authorityRefs"} {
		if i, problem := authority.ListProblem(stringsOf(ap[name])); problem != "" {
			errs = append(errs, newLocated([]string{"approvalPolicy", name, strconv.Itoa(i)},
				fmt.Sprintf(msgApprovalName, name, i, problem), rankCode, false, len(errs)))
		}
	}
	if stringAt(ap, "mode") != ApprovalModeAlways || len(stringsOf(ap["requiredFor"])) == 0 {
		return errs
	}
	if len(stringsOf(ap["authorityRefs"])) == 0 {
		errs = append(errs, newLocated([]string{"approvalPolicy", "authorityRefs"}, msgApprovalAuthorities, rankCode, false, len(errs)))
	}
	return errs
}

func newLocated(tokens []string, msg string, rank int, missing bool, seq int) located {
	escaped := make([]string, len(tokens))
	for i, t := range tokens {
		escaped[i] = jsonptr.Escape(t)
	}
	return located{
		FieldError: FieldError{Code: CodeValidationFailed, Path: jsonptr.Join(escaped), Message: msg},
		rank:       rank,
		offset:     -1,
		depth:      len(tokens),
		missing:    missing,
		seq:        seq,
	}
}

// build reads the Envelope out of a tree the schema accepted. The type
// assertions cannot fail after validation; they are checked anyway so a
// schema edit can never turn into a panic.
func build(obj map[string]any, input json.RawMessage, ts, deadline time.Time) *Envelope {
	actor, _ := obj["actor"].(map[string]any)
	tool, _ := obj["toolPolicy"].(map[string]any)
	budget, _ := obj["budget"].(map[string]any)
	approval, _ := obj["approvalPolicy"].(map[string]any)
	output, _ := obj["outputContract"].(map[string]any)
	allowSideEffects, _ := tool["allowSideEffects"].(bool)
	return &Envelope{
		ContractVersion: stringAt(obj, "contractVersion"),
		RequestID:       stringAt(obj, "requestId"),
		IdempotencyKey:  stringAt(obj, "idempotencyKey"),
		Timestamp:       ts,
		Deadline:        deadline,
		ActorIDRef:      stringAt(actor, "idRef"),
		TenantIDRef:     idRefOf(obj["tenant"]),
		SessionIDRef:    idRefOf(obj["session"]),
		RiskLevel:       stringAt(obj, "riskLevel"),
		Input:           input,
		AllowedTools:    stringsOf(obj["allowedTools"]),
		ToolPolicy: ToolPolicy{
			DefaultDecision:  stringAt(tool, "defaultDecision"),
			MaxCalls:         intOf(tool["maxCalls"]),
			AllowSideEffects: allowSideEffects,
		},
		Budget: Budget{MaxToolCalls: intOf(budget["maxToolCalls"])},
		Approval: ApprovalPolicy{
			Mode:           stringAt(approval, "mode"),
			RequiredFor:    stringsOf(approval["requiredFor"]),
			TimeoutSeconds: intOf(approval["timeoutSeconds"]),
			AuthorityRefs:  stringsOf(approval["authorityRefs"]),
		},
		OutputMaxBytes: limitOf(output["maxBytes"]),
	}
}

// limitOf is a byte limit the envelope states, nil when absent.
func limitOf(v any) *int64 {
	if v == nil {
		return nil
	}
	n := int64(intOf(v))
	return &n
}

func stringAt(obj map[string]any, name string) string {
	s, _ := obj[name].(string)
	return s
}

// idRefOf is the idRef of a tenant or session, "" when it is absent or null.
func idRefOf(v any) string {
	obj, _ := v.(map[string]any)
	return stringAt(obj, "idRef")
}

// stringsOf keeps "absent" (nil) apart from "given and empty" (an empty
// slice): an empty allowedTools allows no tool, an absent one does not
// restrict.
func stringsOf(v any) []string {
	arr, ok := v.([]any)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(arr))
	for _, item := range arr {
		if s, ok := item.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// intOf converts a number the schema accepted as a non-negative integer.
// JSON allows an integer to be written as 4.0 or 4e0, so a plain ParseInt is
// not enough; a limit past what int holds is as good as unlimited and is
// clamped to math.MaxInt.
func intOf(v any) int {
	n, ok := v.(json.Number)
	if !ok {
		return 0
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return clampInt(big.NewInt(i))
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() {
		return 0
	}
	return clampInt(r.Num())
}

func clampInt(i *big.Int) int {
	switch {
	case i.Sign() < 0:
		return 0
	case !i.IsInt64() || i.Int64() > math.MaxInt:
		return math.MaxInt
	default:
		return int(i.Int64())
	}
}
