package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/contractrefine/autonomy/internal/display"
	"github.com/contractrefine/autonomy/internal/httpapi"
)

func init() { extraCommands = append(extraCommands, newApprovals, newApprove) }

const defaultServer = "http://127.0.0.1:8181"

// serverClient asks a running service (audit --server, approvals list;
// approve bounds its request the same way): a service that takes the
// connection and never answers fails the command after serverTimeout
// instead of hanging it.
var serverClient = &http.Client{Timeout: serverTimeout}

// serverTimeout bounds one request of those commands, answer included.
var serverTimeout = 30 * time.Second

func newApprovals(stdout, _ io.Writer) *cobra.Command {
	root := &cobra.Command{Use: "approvals", Short: "Steps that wait for a person's approval"}
	var server, token, state, cursor string
	var limit int
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the approvals the token may decide (--state pending, the default) or its tenant's decisions (--state decided)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if state != "pending" && state != "decided" {
				return fmt.Errorf("--state %q: want pending or decided", state)
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d: want a page size of 1 or more (0: the service's default)", limit)
			}
			q := url.Values{"state": {state}}
			if limit > 0 {
				q.Set("limit", fmt.Sprint(limit))
			}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			u := strings.TrimRight(server, "/") + "/v1/approvals?" + q.Encode()
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, u, nil)
			if err != nil {
				return err
			}
			setBearer(req, token)
			resp, err := serverClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return &answerError{method: http.MethodGet, url: u, status: resp.StatusCode, body: body}
			}
			if asJSON {
				_, err := stdout.Write(append(body, '\n'))
				return err
			}
			var l httpapi.ApprovalList
			if err := json.Unmarshal(body, &l); err != nil {
				return err
			}
			return PrintApprovals(stdout, &l)
		},
	}
	list.Flags().StringVar(&server, "server", defaultServer, "service HTTP API address")
	list.Flags().StringVar(&token, "token", "", "bearer token (default $"+TokenEnv+")")
	list.Flags().StringVar(&state, "state", "pending", "pending or decided")
	list.Flags().IntVar(&limit, "limit", 0, "page size (the service's default when 0)")
	list.Flags().StringVar(&cursor, "cursor", "", "next_cursor of the previous page")
	list.Flags().BoolVar(&asJSON, "json", false, "print the JSON answer")
	root.AddCommand(list)
	return groupCommand(root)
}

// PrintApprovals prints a page of approvals as a table.
func PrintApprovals(w io.Writer, l *httpapi.ApprovalList) error {
	t := display.Text
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PREFLIGHT\tSTEP\tKIND\tACTOR\tSTATE\tAUTHORITIES\tEXPIRES\tDECIDED BY")
	for _, a := range l.Approvals {
		by := ""
		if a.Approver != "" {
			by = a.Approver + " " + a.DecidedAt
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t(a.PreflightID), t(a.StepID), t(a.ToolKind), t(a.ActorID),
			t(a.State), t(strings.Join(a.Authorities, ",")), t(a.ExpiresAt), t(by))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(l.Approvals) == 0 {
		fmt.Fprintln(w, "(none)")
	}
	if l.NextCursor != "" {
		fmt.Fprintf(w, "more: --cursor %s\n", t(l.NextCursor))
	}
	return nil
}

func newApprove(stdout, _ io.Writer) *cobra.Command {
	var server, token, comment string
	var reject, asJSON bool
	cmd := &cobra.Command{
		Use:   "approve PREFLIGHT_ID STEP_ID",
		Short: "Approve (or, with --reject, reject) one step of a preflight that waits for approval",
		Long: "Record a decision on one step with the bearer token from --token or $" + TokenEnv + ": its roles must\n" +
			"include one of the step's authorities, and its subject must not be the preflight's actor.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			decision := "approve"
			if reject {
				decision = "reject"
			}
			body, err := json.Marshal(map[string]string{"decision": decision, "comment": comment})
			if err != nil {
				return err
			}
			u := strings.TrimRight(server, "/") + "/v1/approvals/" + url.PathEscape(args[0]) + "/" + url.PathEscape(args[1])
			ctx, cancel := context.WithTimeout(cmd.Context(), serverTimeout)
			defer cancel()
			status, out, err := postJSON(ctx, u, token, body)
			if err != nil {
				return err
			}
			if status != http.StatusOK {
				return &answerError{method: http.MethodPost, url: u, status: status, body: out}
			}
			if asJSON {
				_, err := stdout.Write(append(out, '\n'))
				return err
			}
			var v httpapi.ApprovalView
			if err := json.Unmarshal(out, &v); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s %s: %s by %s at %s (audit %s)\n", display.Text(v.PreflightID), display.Text(v.StepID),
				display.Text(v.State), display.Text(v.Approver), display.Text(v.DecidedAt), display.Text(v.AuditID))
			return nil
		},
	}
	cmd.Flags().StringVar(&server, "server", defaultServer, "service HTTP API address")
	cmd.Flags().StringVar(&token, "token", "", "bearer token (default $"+TokenEnv+")")
	cmd.Flags().StringVar(&comment, "comment", "", "a comment recorded with the decision")
	cmd.Flags().BoolVar(&reject, "reject", false, "reject the step instead of approving it")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the JSON answer")
	return cmd
}
