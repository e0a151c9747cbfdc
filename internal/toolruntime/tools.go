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
	// KindLedgerDebit debits an account and returns the new balance.
	KindLedgerDebit = "ledger.debit.v1"
	// KindLedgerDebitBuggy is the same tool with a bug: it applies the
	// debit twice. Its capability's postcondition catches the wrong result
	// (the demo's outcome step).
	KindLedgerDebitBuggy = "ledger.debit.buggy.v1"
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
		KindEcho:             echo,
		KindSleep:            sleep,
		KindCustomerRead:     readCustomer,
		KindRefundCreate:     createRefund,
		KindShell:            shell,
		KindPaymentSend:      sendPayment,
		KindLedgerDebit:      func(ctx context.Context, args map[string]any) (any, error) { return debit(args, 1) },
		KindLedgerDebitBuggy: func(ctx context.Context, args map[string]any) (any, error) { return debit(args, 2) },
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

// debit simulates a ledger debit: args.balanceUsd less times × args.amountUsd
// (times is 1 for the real tool, 2 for the buggy one).
func debit(args map[string]any, times int64) (any, error) {
	account, ok := args["accountRef"].(string)
	if !ok || account == "" {
		return nil, invalidArgs("accountRef must be a non-empty string")
	}
	balance, err := numberArg(args, "balanceUsd")
	if err != nil {
		return nil, err
	}
	amount, err := numberArg(args, "amountUsd")
	if err != nil {
		return nil, err
	}
	return map[string]any{"accountRef": account, "balanceUsd": balance - float64(times)*amount}, nil
}

func numberArg(args map[string]any, name string) (float64, error) {
	n, ok := args[name].(json.Number)
	if !ok {
		return 0, invalidArgs("%s must be a number", name)
	}
	f, err := n.Float64()
	if err != nil {
		return 0, invalidArgs("%s must be a number", name)
	}
	return f, nil
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
