package cli

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/contractrefine/autonomy/internal/demo"
)

func init() { extraCommands = append(extraCommands, newDemo) }

func newDemo(stdout, _ io.Writer) *cobra.Command {
	cmd := groupCommand(&cobra.Command{Use: "demo", Short: "Walk through ContractRefine end to end"})
	var target, approverToken string
	var overMCP bool
	cr := &cobra.Command{
		Use:   "contract-refine",
		Short: "Preflight with repair, an allowed tool call, a denied replay, a denied call without a preflight, the audit join",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := demo.Run(cmd.Context(), demo.Options{Target: target, Out: stdout, ApproverToken: approverToken, MCP: overMCP}); err != nil {
				return err
			}
			return nil
		},
	}
	cr.Flags().StringVar(&target, "target", "", "base URL of a deployment (e.g. http://localhost:10000); empty runs everything in-process")
	cr.Flags().StringVar(&approverToken, "approver-token", "", "a target's bearer token with role:payment-approver, for the approval steps (in-process runs make their own)")
	cr.Flags().BoolVar(&overMCP, "mcp", false, "walk the story over MCP (gate.protocol: mcp) with an MCP client; in-process, against the example MCP server")
	cmd.AddCommand(cr)
	return cmd
}
