package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/display"
	"github.com/contractrefine/autonomy/wal"
)

func newHealthcheck(stdout io.Writer) *cobra.Command {
	var target string
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when URL answers 200 (for container health checks)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s answered %s", target, resp.Status)
			}
			fmt.Fprintln(stdout, "ok")
			return nil
		},
	}
	cmd.Flags().StringVar(&target, "url", "http://127.0.0.1:8181/readyz", "URL to check")
	return cmd
}

func newAudit(stdout io.Writer) *cobra.Command {
	var server, token, dataDir, file string
	var include []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "audit AUDIT_ID",
		Short: "Print the chronological join of an audit id's preflight and tool decisions",
		Long: "Print the join from a running service (--server, the default), or, with --data-dir or\n" +
			"--config, straight from the WAL of a stopped service.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var (
				frames []wal.Frame
				err    error
			)
			kinds, ok := wal.AuditKinds(include)
			if !ok {
				return fmt.Errorf("--include takes %s", strings.Join(wal.IncludeValues, ", "))
			}
			if dataDir != "" || file != "" {
				frames, err = auditFromWAL(cmd, file, dataDir, args[0], kinds)
			} else {
				frames, err = auditFromServer(cmd, server, token, args[0], include)
			}
			if err != nil {
				return err
			}
			if asJSON {
				b, err := json.Marshal(map[string]any{"audit_id": args[0], "frames": frames})
				if err != nil {
					return err
				}
				_, err = stdout.Write(append(b, '\n'))
				return err
			}
			return PrintAuditTable(stdout, args[0], frames)
		},
	}
	cmd.Flags().StringVar(&server, "server", "http://127.0.0.1:8181", "service HTTP API address")
	cmd.Flags().StringVar(&token, "token", "", "bearer token for the read endpoints (default $"+TokenEnv+")")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "read the WAL in this data directory instead of asking a server")
	cmd.Flags().StringVar(&file, "config", "", "read the WAL of this configuration's data_dir instead of asking a server")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the JSON join")
	// One source: a server and a WAL given together would silently use one.
	cmd.MarkFlagsMutuallyExclusive("server", "data-dir")
	cmd.MarkFlagsMutuallyExclusive("server", "config")
	cmd.Flags().StringSliceVar(&include, "include", nil, "also join these frame kinds: outcome, approval or all")
	return cmd
}

// TokenEnv names the variable that the commands calling the service read
// their bearer token from when --token is not given: a flag's value shows
// in the process list to every local user, the environment does not.
const TokenEnv = "AUTONOMY_TOKEN"

// setBearer sets req's bearer token: token (the --token flag), else
// $AUTONOMY_TOKEN, else none.
func setBearer(req *http.Request, token string) {
	if token == "" {
		token = os.Getenv(TokenEnv)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
}

// auditFromServer asks a running service for the join.
func auditFromServer(cmd *cobra.Command, server, token, auditID string, include []string) ([]wal.Frame, error) {
	u := strings.TrimRight(server, "/") + "/v1/audit/" + url.PathEscape(auditID)
	if len(include) > 0 {
		u += "?" + url.Values{"include": {strings.Join(include, ",")}}.Encode()
	}
	req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	setBearer(req, token)
	resp, err := serverClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &answerError{method: http.MethodGet, url: u, status: resp.StatusCode, body: body}
	}
	var join struct {
		Frames []wal.Frame `json:"frames"`
	}
	if err := json.Unmarshal(body, &join); err != nil {
		return nil, err
	}
	return join.Frames, nil
}

// auditFromWAL reads the join from the WAL of a stopped service.
func auditFromWAL(cmd *cobra.Command, file, dataDir, auditID string, kinds []string) ([]wal.Frame, error) {
	db, err := openWAL(cmd, file, dataDir)
	if errors.Is(err, wal.ErrLocked) {
		return nil, fmt.Errorf("%w; for a running server use --server", err)
	}
	if err != nil {
		return nil, err
	}
	defer db.Close()
	frames, err := db.AuditFramesOf(cmd.Context(), auditID, kinds)
	if err != nil {
		return nil, err
	}
	if len(frames) == 0 {
		return nil, fmt.Errorf("no frames have audit id %s in %s", auditID, db.Path())
	}
	return frames, nil
}

// PrintAuditTable prints frames as a terminal table, one row per frame.
func PrintAuditTable(w io.Writer, auditID string, frames []wal.Frame) error {
	unit := "frames"
	if len(frames) == 1 {
		unit = "frame"
	}
	fmt.Fprintf(w, "audit %s: %d %s\n", display.Text(auditID), len(frames), unit)
	// Each replica numbers its own log: on the etcd backend a join's seqs
	// are told apart by the replica that wrote them.
	replicas := make([]string, len(frames))
	named := false
	for i := range frames {
		frames[i].Attr("replica", &replicas[i])
		named = named || replicas[i] != ""
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if named {
		fmt.Fprint(tw, "REPLICA\t")
	}
	fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tOUTCOME\tREASON\tDETAIL")
	for i, f := range frames {
		outcome, reason, detail := auditRow(&f)
		if named {
			fmt.Fprintf(tw, "%s\t", display.Text(replicas[i]))
		}
		// Agents wrote much of this (tool kinds, step ids): no control or
		// bidi character of theirs reaches the operator's terminal.
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", f.Seq, display.Text(f.Timestamp), display.Text(strings.TrimPrefix(f.Kind, "autonomy.")),
			display.Text(outcome), display.Text(reason), display.Text(detail))
	}
	return tw.Flush()
}

// auditRow is the outcome, reason and detail columns of frame f; a frame
// whose attrs do not decode shows what did.
func auditRow(f *wal.Frame) (outcome, reason, detail string) {
	switch f.Kind {
	case wal.KindPreflight:
		a, _ := f.Preflight()
		if a.SubmitAttrs != nil {
			reason = a.Reason
		}
		return string(a.Outcome), reason, a.PreflightID
	case wal.KindDecision:
		a, _ := f.Decision()
		detail = "tool " + a.ToolKind
		if a.StepID != "" {
			detail += " step " + a.StepID
		}
		if !a.Enforced {
			detail += " (advisory, not enforced)"
		}
		if a.AdvisoryReason != "" {
			detail += " advisory " + a.AdvisoryReason
		}
		return a.Outcome, a.Reason, detail
	case wal.KindOutcome:
		a, _ := f.Outcome()
		detail = fmt.Sprintf("tool %s status %d seen by %s", a.ToolKind, a.Status, a.ReportedBy)
		if a.StepID != "" {
			detail = fmt.Sprintf("tool %s step %s status %d seen by %s", a.ToolKind, a.StepID, a.Status, a.ReportedBy)
		}
		switch a.Effect() {
		case wal.EffectWarning:
			detail += " (passed with a warning)"
		case wal.EffectEnforced:
			detail += " (response replaced by 502)"
		case wal.EffectAdvisory:
			detail += " (advisory, not enforced)"
		}
		return a.Outcome, a.Reason, detail
	case wal.KindConsumed:
		a, _ := f.Consumed()
		return "", "", a.PreflightID
	case wal.KindApproval:
		a, _ := f.Approval()
		return a.Decision, "", fmt.Sprintf("%s step %s tool %s by %s", a.PreflightID, a.StepID, a.ToolKind, a.Approver)
	}
	return "", "", ""
}

func newWAL(stdout io.Writer) *cobra.Command {
	cmd := groupCommand(&cobra.Command{Use: "wal", Short: "Inspect and maintain the write-ahead log"})
	var dataDir, file string
	verify := &cobra.Command{
		Use:   "verify",
		Short: "Check the WAL's hash chain, its indexes and its pages; exit 1 naming the first bad seq or page",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := openWALWith(cmd, file, dataDir, wal.Options{ReadOnly: true, CheckPages: true})
			if err != nil {
				return err
			}
			defer db.Close()
			rep, err := db.Verify(cmd.Context())
			if err != nil {
				return err
			}
			switch {
			case rep.OK():
			case rep.ChainHeld:
				fmt.Fprintf(stdout, "wal verify: FAILED at seq %d: %s (the hash chain of its %d frames holds; an index record disagrees with it)\n",
					rep.BadSeq, rep.Problem, rep.Frames)
				return exitError{code: 1}
			default:
				fmt.Fprintf(stdout, "wal verify: FAILED at seq %d: %s (%d frames good before it)\n", rep.BadSeq, rep.Problem, rep.Frames)
				return exitError{code: 1}
			}
			// The chain and the indexes hold: then the pages around them.
			pages, err := db.CheckPages()
			if err != nil {
				return err
			}
			if !pages.OK() {
				fmt.Fprintf(stdout, "wal verify: FAILED: the file's pages are inconsistent: %s", pages.Problems[0])
				if n := len(pages.Problems) - 1 + pages.More; n > 0 {
					fmt.Fprintf(stdout, " (and %d more problems)", n)
				}
				fmt.Fprintf(stdout, "; the hash chain of its %d frames holds\n", rep.Frames)
				return exitError{code: 1}
			}
			fmt.Fprintf(stdout, "wal verify: ok, %d frames (seq %d..%d), hash chain intact\n", rep.Frames, rep.FirstSeq, rep.LastSeq)
			return nil
		},
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", "", "data directory (default: from --config, else ./data)")
	cmd.PersistentFlags().StringVar(&file, "config", "", "YAML configuration file")
	cmd.AddCommand(verify)
	for _, extra := range extraWALCommands {
		cmd.AddCommand(extra(stdout, &file, &dataDir))
	}
	return cmd
}

// extraWALCommands are wal subcommands defined in other files.
var extraWALCommands []func(stdout io.Writer, configFile, dataDir *string) *cobra.Command

// walDir resolves the data directory from --data-dir, else the config file.
func walDir(cmd *cobra.Command, file, dataDir string) (string, error) {
	if dataDir != "" {
		return dataDir, nil
	}
	cfg, err := config.Load(file)
	if err != nil {
		return "", err
	}
	return cfg.DataDir, nil
}

// groupCommand makes cmd, which only holds subcommands, an error when run
// alone or with an unknown subcommand: cobra would print its help and exit
// 0, so a typo in a cron job's "wal verify" would pass.
func groupCommand(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cmd.SetOut(cmd.ErrOrStderr())
		_ = cmd.Help() // the error below is the answer
		return fmt.Errorf("%s needs a subcommand", cmd.CommandPath())
	}
	return cmd
}
