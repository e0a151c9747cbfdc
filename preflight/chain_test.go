package preflight

import (
	"errors"
	"testing"
)

func TestDecisionChain(t *testing.T) {
	cases := map[string]struct {
		chain   []string
		offline bool
		want    string
	}{
		"empty chain": {
			want: `{"contract":"decision_chain_complete","outcome":"not_applicable","severity":"info","reason":"","repair_hints":[],
				"evidence":{"detail":"the request names no decision chain"}}`,
		},
		"passed": {
			chain: []string{"au_passed00000000000", "au_passed00000000000"},
			want:  `{"contract":"decision_chain_complete","outcome":"pass","severity":"blocking","reason":"","repair_hints":[],"evidence":{}}`,
		},
		"not found online": {
			chain: []string{"au_passed00000000000", "au_missing0000000000"},
			want: `{"contract":"decision_chain_complete","outcome":"fail","severity":"blocking","reason":"contract: decision_chain_incomplete","repair_hints":[],
				"evidence":{"violations":[{"field":"/context/decision_chain/1","message":"no decision is recorded under audit id \"au_missing0000000000\""}]}}`,
		},
		"not passed": {
			chain: []string{"au_denied00000000000"},
			want: `{"contract":"decision_chain_complete","outcome":"fail","severity":"blocking","reason":"contract: decision_chain_incomplete","repair_hints":[],
				"evidence":{"violations":[{"field":"/context/decision_chain/0","message":"the decision under audit id \"au_denied00000000000\" did not pass"}]}}`,
		},
		"not found offline is advisory": {
			chain: []string{"au_missing0000000000", "au_passed00000000000"}, offline: true,
			want: `{"contract":"decision_chain_complete","outcome":"fail","severity":"advisory","reason":"contract: chain_unverifiable_offline","repair_hints":[],
				"evidence":{"unverifiable_offline":["au_missing0000000000"]}}`,
		},
		"not passed offline stays blocking": {
			chain: []string{"au_missing0000000000", "au_denied00000000000"}, offline: true,
			want: `{"contract":"decision_chain_complete","outcome":"fail","severity":"blocking","reason":"contract: decision_chain_incomplete","repair_hints":[],
				"evidence":{"unverifiable_offline":["au_missing0000000000"],
					"violations":[{"field":"/context/decision_chain/1","message":"the decision under audit id \"au_denied00000000000\" did not pass"}]}}`,
		},
		"empty id is blocking offline": {
			chain: []string{""}, offline: true,
			want: `{"contract":"decision_chain_complete","outcome":"fail","severity":"blocking","reason":"contract: decision_chain_incomplete","repair_hints":[],
				"evidence":{"violations":[{"field":"/context/decision_chain/0","message":"empty audit id"}]}}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := echoRequest(1)
			req.Context.DecisionChain = tc.chain
			e := newEvaluation(req, nil, loadGovernance(t))
			e.chain, e.offline = testChain(), tc.offline
			got, err := checkDecisionChain(e)
			if err != nil {
				t.Fatal(err)
			}
			assertJSON(t, got, tc.want)
		})
	}

	errBoom := errors.New("wal: closed")
	errCases := map[string]struct {
		chain ChainResolver
		want  error
	}{
		"resolver error": {chain: mapChain{err: errBoom}, want: errBoom},
		"no resolver":    {chain: nil, want: ErrNoChainResolver},
	}
	for name, tc := range errCases {
		t.Run(name, func(t *testing.T) {
			req := echoRequest(1)
			req.Context.DecisionChain = []string{"au_passed00000000000"}
			e := newEvaluation(req, nil, nil)
			e.chain = tc.chain
			if _, err := checkDecisionChain(e); !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
}
