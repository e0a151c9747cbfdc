package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/internal/benchutil"
	"github.com/contractrefine/autonomy/internal/bundle/bundletest"
	"github.com/contractrefine/autonomy/internal/gateway"
	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/wal"
)

// benchPolicy allows every declared capability.
const benchPolicy = `package autonomy

import rego.v1

allow if data.autonomy.capabilities[input.action.kind]
`

// benchData declares a debit with no clauses and one whose result must
// pass two postconditions (docs/API.md).
const benchData = `autonomy:
  capabilities:
    ledger.plain: { zones: ["*"] }
    ledger.checked:
      zones: ["*"]
      contract:
        postconditions: ["status == 200", "result.balance == old(args.balance) - args.amount"]
`

// BenchmarkGatewayOutcome measures a tool call through the built-in
// gateway (real gate, real WAL, an upstream answering at once) whose
// capability has no clauses, against one whose result passes a
// postcondition, at 1 and 64 callers, in the same run; "direct" is the
// upstream without the gateway, so each row's added latency is its p50
// less direct's. Every gated call writes its outcome frame either way;
// the difference is judging the result. docs/PERFORMANCE.md has figures.
//
//	go test ./internal/gateway -run '^$' -bench GatewayOutcome -benchtime 3000x
func BenchmarkGatewayOutcome(b *testing.B) {
	bundle := bundletest.Load(b, map[string]string{"policy.rego": benchPolicy, "data.yaml": benchData}, nil)
	db, err := wal.Open(filepath.Join(b.TempDir(), "wal"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	gate := binding.New(binding.Options{Store: db, Log: db, Outcomes: db, Policy: func() binding.Policy { return bundle },
		Mode: binding.ModeEnforce, NewID: ids.Audit})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"account":"acct:1","balance":75}`))
	}))
	defer upstream.Close()
	u, _ := url.Parse(upstream.URL)
	var n atomic.Int64
	gw := httptest.NewServer(gateway.New(gateway.Options{Gate: gate, Judge: gate, Upstream: u, MaxBodyBytes: 1 << 20,
		NewRequestID: func() string { return "rq-" + strconv.FormatInt(n.Add(1), 10) }}))
	defer gw.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}, Timeout: 10 * time.Second}

	rows := []struct{ name, target, kind string }{
		{"direct", upstream.URL, "ledger.plain"},
		{"no-clauses", gw.URL, "ledger.plain"},
		{"postcondition", gw.URL, "ledger.checked"},
	}
	call := func(target string, body []byte) (time.Duration, error) {
		start := time.Now()
		resp, err := client.Post(target+"/v1/tool", "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get(binding.HeaderPostconditionWarning) != "" {
			return 0, fmt.Errorf("status %d", resp.StatusCode)
		}
		return time.Since(start), nil
	}
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			// b.N calls per row, in rounds that take turns between the
			// rows, so a noisy neighbour weighs on all three alike.
			const rounds = 10
			took := make([][]time.Duration, len(rows))
			for r := range rows {
				took[r] = make([]time.Duration, 0, b.N)
			}
			var mu sync.Mutex
			for round := range rounds {
				per := b.N / rounds
				if round < b.N%rounds {
					per++
				}
				for r, row := range rows {
					body := []byte(`{"kind":"` + row.kind + `","args":{"account":"acct:1","balance":100,"amount":25}}`)
					benchutil.ParallelN(b, per, conc, func(int) error {
						d, err := call(row.target, body)
						if err != nil {
							return fmt.Errorf("%s: %w", row.name, err)
						}
						mu.Lock()
						took[r] = append(took[r], d)
						mu.Unlock()
						return nil
					})
				}
			}
			p50 := make([]float64, len(rows))
			for r, row := range rows {
				slices.Sort(took[r])
				p50[r] = float64(took[r][len(took[r])/2].Microseconds())
				b.ReportMetric(p50[r], row.name+"-p50-µs")
			}
			addedNone, addedPost := p50[1]-p50[0], p50[2]-p50[0]
			b.ReportMetric(addedPost-addedNone, "postcondition-added-p50-µs")
			if addedNone > 0 {
				b.ReportMetric(addedPost/addedNone, "added-ratio")
			}
		})
	}
}
