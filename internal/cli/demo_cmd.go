package cli

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/contractrefine/autonomy/internal/demo"
)

func init() { extraCommands = append(extraCommands, newDemo) }

// checkTarget refuses a --target that is not the base URL of a deployment:
// an http or https URL with a host, and no query or fragment (the demo
// appends the API's paths to it).
func checkTarget(target string) error {
	if target == "" {
		return nil
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" ||
		u.ForceQuery || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("--target %q: want the base URL of a deployment, such as http://localhost:10000 "+
			"(http or https, a host, no query or fragment)", target)
	}
	return nil
}

func newDemo(stdout, _ io.Writer) *cobra.Command {
	cmd := groupCommand(&cobra.Command{Use: "demo", Short: "Walk through ContractRefine end to end"})
	var target, approverToken string
	var overMCP bool
	cr := &cobra.Command{
		Use:   "contract-refine",
		Short: "Preflight with repair, an allowed tool call, a denied replay, a denied call without a preflight, the audit join",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkTarget(target); err != nil {
				return err
			}
			// Interrupted, the in-process run still removes its temporary
			// data directory (its WAL and the approver's token).
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
			defer stop()
			return demo.Run(ctx, demo.Options{Target: target, Out: stdout, ApproverToken: approverToken, MCP: overMCP})
		},
	}
	cr.Flags().StringVar(&target, "target", "", "base URL of a deployment (e.g. http://localhost:10000); empty runs everything in-process")
	cr.Flags().StringVar(&approverToken, "approver-token", "", "a target's bearer token with role:payment-approver, for the approval steps (in-process runs make their own)")
	cr.Flags().BoolVar(&overMCP, "mcp", false, "walk the story over MCP (gate.protocol: mcp) with an MCP client; in-process, against the example MCP server")
	cmd.AddCommand(cr)
	return cmd
}
