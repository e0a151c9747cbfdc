package preflight

import (
	"context"
	"fmt"
	"strconv"
)

// ChainResolver answers whether an earlier decision is on record. The WAL
// implements it: found means an autonomy.preflight frame of tenant exists
// under auditID ("" is a preflight with no tenant), passed that its
// outcome was pass. Another tenant's decision is not found: a plan builds
// only on its own tenant's decisions, and learns nothing of another's. An
// error means the record could not be read, and fails the evaluation
// closed.
type ChainResolver interface {
	ChainStatus(ctx context.Context, auditID, tenant string) (found bool, passed bool, err error)
}

// noDecisionChain is the evidence of the row when the request names no
// decision chain.
var noDecisionChain = detailEvidence("the request names no decision chain")

// checkDecisionChain is contract 7: every earlier decision the plan builds
// on is on record and passed. Offline, an id the local record lacks cannot
// be proven either way, which is recorded as advisory: an advisory row is
// shown, apart from blocking ones, and leaves the outcome alone.
func checkDecisionChain(e *evaluation) (Result, error) {
	chain := e.req.Context.DecisionChain
	if len(chain) == 0 {
		return notApplicableWith(ContractDecisionChainComplete, noDecisionChain), nil
	}
	if e.chain == nil {
		return Result{}, ErrNoChainResolver
	}
	r := newRow(ContractDecisionChainComplete)
	tenant := ""
	if e.env != nil {
		tenant = e.env.TenantIDRef
	}
	var unverifiable []string
	checked := make(map[string]bool, len(chain))
	for i, id := range chain {
		field := "/context/decision_chain/" + strconv.Itoa(i)
		if id == "" {
			r.fail("", field, "empty audit id")
			continue
		}
		if checked[id] {
			continue
		}
		checked[id] = true
		found, passed, err := e.chain.ChainStatus(e.ctx, id, tenant)
		if err != nil {
			return Result{}, fmt.Errorf("resolve decision chain %s: %w", id, err)
		}
		switch {
		case !found && e.offline:
			unverifiable = append(unverifiable, id)
		case !found:
			r.fail("", field, fmt.Sprintf("no decision is recorded under audit id %q", id))
		case !passed:
			r.fail("", field, fmt.Sprintf("the decision under audit id %q did not pass", id))
		}
	}
	if len(r.violations) > 0 || len(unverifiable) == 0 {
		if len(unverifiable) > 0 {
			r.evidence["unverifiable_offline"] = unverifiable
		}
		return r.result(ReasonDecisionChainIncomplete), nil
	}
	return Result{
		Contract:    ContractDecisionChainComplete,
		Outcome:     RowFail,
		Severity:    SeverityAdvisory,
		Reason:      ReasonChainUnverifiableOffline,
		RepairHints: []Hint{},
		Evidence:    map[string]any{"unverifiable_offline": unverifiable},
	}, nil
}
