package toolruntime

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/contractrefine/autonomy/internal/canon"
)

// MaxSleep bounds tool.sleep, so a caller cannot park a connection for long.
const MaxSleep = 5 * time.Second

// Tool kinds the handler serves.
const (
	KindEcho         = "tool.echo"
	KindSleep        = "tool.sleep"
	KindCustomerRead = "customer.read.v3"
	KindRefundCreate = "refund.create.v2"
	KindShell        = "tool.shell"
	KindPaymentSend  = "payment.send.v1"
)

// toolFunc runs one tool on decoded args. A *toolError carries the status
// and code to answer with; a context error means the caller went away.
type toolFunc func(ctx context.Context, args map[string]any) (any, error)

// toolError is a refusal with a status and code, such as bad args.
type toolError struct {
	status  int
	code    string
	message string
}

func (e *toolError) Error() string { return "tools: " + e.code + ": " + e.message }

func invalidArgs(format string, a ...any) error {
	return &toolError{status: http.StatusBadRequest, code: CodeInvalidArgs, message: fmt.Sprintf(format, a...)}
}

func builtinTools() map[string]toolFunc {
	return map[string]toolFunc{
		KindEcho:         echo,
		KindSleep:        sleep,
		KindCustomerRead: readCustomer,
		KindRefundCreate: createRefund,
		KindShell:        shell,
		KindPaymentSend:  sendPayment,
	}
}

func echo(_ context.Context, args map[string]any) (any, error) {
	return args, nil
}

// sleep waits args.ms milliseconds (0 to 5000) or until the request's context
// ends, so a client that hangs up frees the handler at once.
func sleep(ctx context.Context, args map[string]any) (any, error) {
	n, ok := args["ms"].(json.Number)
	if !ok {
		return nil, invalidArgs("ms must be a number")
	}
	ms, err := n.Int64()
	if err != nil || ms < 0 || time.Duration(ms)*time.Millisecond > MaxSleep {
		return nil, invalidArgs("ms must be an integer from 0 to %d", MaxSleep.Milliseconds())
	}
	timer := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		return map[string]any{"slept_ms": ms}, nil
	}
}

// readCustomer returns a made-up customer whose id is derived from the case
// reference, so the same case always yields the same customer.
func readCustomer(_ context.Context, args map[string]any) (any, error) {
	caseRef, ok := args["caseRef"].(string)
	if !ok || caseRef == "" {
		return nil, invalidArgs("caseRef must be a non-empty string")
	}
	return map[string]any{
		"customer": map[string]any{
			"id":      "cust_" + shortDigest(canon.DigestBytes([]byte(caseRef))),
			"caseRef": caseRef,
			"name":    "Example Customer",
			"tier":    "standard",
		},
	}, nil
}

// createRefund simulates a refund. The receipt id is a digest of the
// canonical args, so a retried call with the same args gets the same receipt,
// as an idempotent payments API would give.
func createRefund(_ context.Context, args map[string]any) (any, error) {
	caseRef, ok := args["caseRef"].(string)
	if !ok || caseRef == "" {
		return nil, invalidArgs("caseRef must be a non-empty string")
	}
	n, ok := args["amountUsd"].(json.Number)
	if !ok {
		return nil, invalidArgs("amountUsd must be a number")
	}
	amount, err := n.Float64()
	if err != nil || amount <= 0 {
		return nil, invalidArgs("amountUsd must be greater than 0")
	}
	digest, err := canon.Digest(args)
	if err != nil {
		return nil, invalidArgs("args have no canonical form: %v", err)
	}
	return map[string]any{
		"receipt": map[string]any{
			"id":        "rcpt_" + shortDigest(digest),
			"caseRef":   caseRef,
			"amountUsd": n,
			"status":    "simulated",
		},
	}, nil
}

// sendPayment simulates a payment that a person approved (the default
// bundle's payment.send.v1 waits for role:payment-approver).
func sendPayment(_ context.Context, args map[string]any) (any, error) {
	to, ok := args["to"].(string)
	if !ok || to == "" {
		return nil, invalidArgs("to must be a non-empty string")
	}
	n, ok := args["amountUsd"].(json.Number)
	if !ok {
		return nil, invalidArgs("amountUsd must be a number")
	}
	if amount, err := n.Float64(); err != nil || amount <= 0 {
		return nil, invalidArgs("amountUsd must be greater than 0")
	}
	digest, err := canon.Digest(args)
	if err != nil {
		return nil, invalidArgs("args have no canonical form: %v", err)
	}
	return map[string]any{"payment": map[string]any{"id": "pay_" + shortDigest(digest), "to": to,
		"amountUsd": n, "status": "simulated"}}, nil
}

// shell stands in for a dangerous tool in demos and never runs anything.
func shell(context.Context, map[string]any) (any, error) {
	return map[string]any{"simulated": true}, nil
}

// shortDigest keeps 96 bits of a "sha256:<hex>" digest: plenty to tell
// example records apart, short enough to read in a log.
func shortDigest(digest string) string {
	return strings.TrimPrefix(digest, "sha256:")[:24]
}
