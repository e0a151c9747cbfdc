package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/internal/display"
	"github.com/contractrefine/autonomy/preflight"
)

func init() { extraCommands = append(extraCommands, newPreflight) }

// Exit codes of autonomy preflight: they let a script branch on the verdict.
const (
	exitPreflightError          = 1
	exitPreflightRepairRequired = 2
	exitPreflightDeny           = 3
)

func newPreflight(stdout, stderr io.Writer) *cobra.Command {
	var file, server, token string
	var dryRun, asJSON bool
	var example string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "preflight -f plan.json | --example NAME",
		Short: "Submit a PreflightRequest and print the verdict with its contract rows and repair hints",
		Long: `Submit a PreflightRequest (docs/API.md#preflightrequest) from a file ("-" reads stdin) to the
service and print the verdict: outcome and reason, the seven contract rows and
any clause rows (advisory failures marked), each repair hint, and the
preflight id with its expiry.

Exit status: 0 pass, 2 repair_required, 3 deny, 1 when no decision was made
(the error body's code, path and message are printed).

--example NAME prints a PreflightRequest that passes on the default bundle
(plain: without an envelope; envelope: with one), the example of
docs/API.md with its attestation and envelope times made fresh, and sends
nothing:

  autonomy preflight --example plain | autonomy preflight -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if example != "" {
				text, err := ExampleText(example)
				if err != nil {
					return err
				}
				_, err = stdout.Write(Freshen(text, time.Now()))
				return err
			}
			if file == "" {
				return fmt.Errorf("preflight: give the plan with -f FILE (or -f - for stdin), or print one with --example %s", strings.Join(ExampleNames(), "|"))
			}
			body, err := readPlan(cmd, file)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			base := strings.TrimRight(server, "/")
			u := base + "/v1/preflight"
			if dryRun {
				u += "?dry_run=true"
			}
			status, resp, err := postJSON(ctx, u, token, body)
			if err != nil {
				return err
			}
			if status != http.StatusOK {
				return &answerError{method: http.MethodPost, url: u, status: status, body: resp}
			}
			var d preflight.Decision
			if err := json.Unmarshal(resp, &d); err != nil {
				return fmt.Errorf("%s answered 200 with a body that is not a decision: %w", u, err)
			}
			if asJSON {
				if _, err := stdout.Write(append(bytes.TrimSpace(resp), '\n')); err != nil {
					return err
				}
			} else if err := PrintDecision(stdout, &d, base); err != nil {
				return err
			}
			switch d.Outcome {
			case preflight.OutcomePass:
				return nil
			case preflight.OutcomeRepairRequired:
				return exitError{code: exitPreflightRepairRequired}
			default:
				return exitError{code: exitPreflightDeny}
			}
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", `PreflightRequest JSON file ("-" for stdin)`)
	cmd.Flags().StringVar(&server, "server", "http://127.0.0.1:8181", "service HTTP API address")
	cmd.Flags().StringVar(&token, "token", "", "bearer token, when the service requires one (default $"+TokenEnv+")")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "evaluate without recording (no ids, not bindable, no repair budget spent)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the decision JSON as returned")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the verdict")
	cmd.Flags().StringVar(&example, "example", "", "print an example PreflightRequest that passes on the default bundle ("+strings.Join(ExampleNames(), ", ")+") and exit")
	cmd.MarkFlagsMutuallyExclusive("file", "example")
	return cmd
}

func readPlan(cmd *cobra.Command, file string) ([]byte, error) {
	if file == "-" {
		return io.ReadAll(cmd.InOrStdin())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read plan: %w", err)
	}
	return b, nil
}

func postJSON(ctx context.Context, u, token string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	setBearer(req, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("read %s answer: %w", u, err)
	}
	return resp.StatusCode, b, nil
}

// answerError is an error answer from the service's HTTP API. Every
// command that calls the API returns one, so Main prints each the same
// way: the request, then the error body's first code, path and message
// (docs/API.md#errors), then any others; a body of another shape is quoted raw.
type answerError struct {
	method, url string
	status      int
	body        []byte
}

func (e *answerError) Error() string {
	type apiErr struct {
		Code      string `json:"code"`
		Path      string `json:"path"`
		Message   string `json:"message"`
		Retryable bool   `json:"retryable"`
	}
	var b struct {
		Error  *apiErr  `json:"error"`
		Errors []apiErr `json:"errors"`
	}
	head := e.method + " " + e.url + ": "
	if json.Unmarshal(e.body, &b) != nil || b.Error == nil || b.Error.Code == "" {
		// The body is quoted whole, made safe for a terminal.
		return head + fmt.Sprintf("answered %d %s: %s", e.status, http.StatusText(e.status), display.Text(strings.TrimSpace(string(e.body))))
	}
	line := func(a apiErr) string {
		s := a.Code
		if a.Path != "" {
			s += " at " + a.Path
		}
		if a.Message != "" {
			s += ": " + a.Message
		}
		if a.Retryable {
			s += " (retryable)"
		}
		return display.Text(s) // the message may quote the request
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%s%d %s", head, e.status, line(*b.Error))
	if len(b.Errors) > 1 {
		for _, a := range b.Errors {
			fmt.Fprintf(&out, "\n  - %s", line(a))
		}
	}
	return out.String()
}

// PrintDecision prints a preflight decision for a terminal. server, when
// set, is used to print the explain page's address.
func PrintDecision(w io.Writer, d *preflight.Decision, server string) error {
	// Step ids, kinds and hints come from the request: no control or bidi
	// character of the agent's reaches the operator's terminal.
	t := display.Text
	fmt.Fprintf(w, "outcome: %s\nreason:  %s\n", t(string(d.Outcome)), t(d.Reason))
	if d.PreflightID != "" {
		fmt.Fprintf(w, "preflight_id: %s\naudit_id:     %s\n", t(d.PreflightID), t(d.AuditID))
	} else {
		fmt.Fprintln(w, "dry run: nothing recorded, nothing bindable")
	}
	if d.Eligibility.Allowed {
		fmt.Fprintf(w, "binds: %s until %s\n", t(strings.Join(d.Eligibility.BoundToolKinds, ", ")), d.Eligibility.ExpiresAt)
	} else {
		fmt.Fprintf(w, "binds: nothing (expires_at %s)\n", d.Eligibility.ExpiresAt)
	}
	fmt.Fprintf(w, "attempt: %d, decided %s\n\n", d.Attempt, d.DecidedAt)

	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTRACT\tOUTCOME\tSEVERITY\tREASON")
	rows := func(rs []preflight.Result) {
		for _, r := range rs {
			line := fmt.Sprintf("%s\t%s\t%s\t%s", t(r.Contract), t(string(r.Outcome)), t(string(r.Severity)), t(r.Reason))
			if r.Outcome == preflight.RowFail && r.Severity == preflight.SeverityAdvisory {
				line += "\tADVISORY: recorded, does not change the outcome"
			}
			fmt.Fprintln(tw, line)
		}
	}
	rows(d.ContractResults)
	rows(d.ClauseResults)
	if err := tw.Flush(); err != nil {
		return err
	}

	var hints []string
	for _, rs := range [][]preflight.Result{d.ContractResults, d.ClauseResults} {
		for _, r := range rs {
			for _, h := range r.RepairHints {
				s, err := canon.Marshal(h.Suggestion)
				if err != nil {
					s = []byte(fmt.Sprint(h.Suggestion))
				}
				bounded := ""
				if h.Bounded {
					bounded = " (bounded)"
				}
				hints = append(hints, fmt.Sprintf("  %s → %s%s  [%s]", t(h.Field), t(string(s)), bounded, t(r.Contract)))
			}
		}
	}
	if len(hints) > 0 {
		fmt.Fprintln(w, "\nrepair hints (field → suggestion):")
		for _, h := range hints {
			fmt.Fprintln(w, h)
		}
	}
	if server != "" && d.AuditID != "" {
		fmt.Fprintf(w, "\nexplain: %s/ui/audit/%s\n", server, url.PathEscape(d.AuditID))
	}
	return nil
}
