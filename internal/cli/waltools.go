package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/wal"
)

func init() {
	extraWALCommands = append(extraWALCommands, newWALCompact, newWALStats, newWALExport)
}

// walKinds are the frame kinds --kind accepts, also without "autonomy.".
var walKinds = []string{wal.KindPreflight, wal.KindDecision, wal.KindConsumed, wal.KindOutcome, wal.KindApproval}

// openWAL opens the log of --data-dir (or the config file's data_dir) for
// reading only, so a copy or a backup the user may only read will do. The
// server holds the file lock while it runs, so these tools work on a
// stopped server's data directory (the server compacts by itself). A
// directory without a log is an error: opening would create an empty one,
// which a mistyped path would then "verify".
func openWAL(cmd *cobra.Command, file, dataDir string) (*wal.DB, error) {
	return openWALWith(cmd, file, dataDir, wal.Options{ReadOnly: true})
}

// openWALWith is openWAL with o: for writing too when o.ReadOnly is
// false (compact), with its pages checked too when o.CheckPages (verify).
func openWALWith(cmd *cobra.Command, file, dataDir string, o wal.Options) (*wal.DB, error) {
	dir, err := walDir(cmd, file, dataDir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, wal.FileName)
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("no write-ahead log in %s: %w", dir, err)
	}
	if st.Size() == 0 {
		// Refused for compact as for the read-only commands: a writable
		// open would start a new log on it and hide that the old one is
		// gone.
		return nil, fmt.Errorf("open wal %s: %w", path, wal.ErrEmptyFile)
	}
	o.OpenTimeout = 2 * time.Second
	if !o.ReadOnly {
		// A writable open may upgrade the log's format, which an older
		// binary then refuses: it says so, as serve does.
		o.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	}
	return wal.Open(dir, &o)
}

func newWALCompact(stdout io.Writer, file, dataDir *string) *cobra.Command {
	var retention time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "compact",
		Short: "Remove frames older than the retention, keeping every live binding and its consumed markers",
		Long: `Remove the frames older than wal.retention (or --retention) from the front of
the log, with their index records. A preflight whose binding has not expired
by the cut-off stops the cut, so it and its consumed markers stay and replays
stay denied. The hash chain stays verifiable: run "autonomy wal verify" after.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("retention") {
				cfg, err := config.Load(*file)
				if err != nil {
					return err
				}
				retention = cfg.WAL.Retention
			}
			if retention <= 0 {
				return fmt.Errorf("--retention must be positive, got %s", retention)
			}
			db, err := openWALWith(cmd, *file, *dataDir, wal.Options{})
			if err != nil {
				return err
			}
			defer db.Close()
			rep, err := db.Compact(cmd.Context(), time.Now().Add(-retention))
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONLine(stdout, rep)
			}
			printCompactReport(stdout, retention, rep)
			return nil
		},
	}
	cmd.Flags().DurationVar(&retention, "retention", 0, "remove frames older than this (default: wal.retention from --config, else 720h)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func printCompactReport(w io.Writer, retention time.Duration, rep wal.CompactReport) {
	fmt.Fprintf(w, "wal compact: cut-off %s (retention %s)\n", rep.Before.Format(time.RFC3339), retention)
	if rep.Frames == 0 {
		fmt.Fprintln(w, "  removed nothing")
	} else {
		fmt.Fprintf(w, "  removed %d frames (seq %d..%d) in %d transactions\n", rep.Frames, rep.FirstSeq, rep.LastSeq, rep.Transactions)
		fmt.Fprintf(w, "  removed %d bindings, %d consumed markers, %d repair sessions, %d idempotency keys\n",
			rep.Preflights, rep.ConsumedMarkers, rep.Sessions, rep.IdempotencyKeys)
	}
	switch rep.StopReason {
	case wal.StopEnd:
		fmt.Fprintln(w, "  the log is now empty of frames; the chain continues from its base")
	case wal.StopRetention:
		fmt.Fprintf(w, "  kept from seq %d: younger than the cut-off\n", rep.KeptFrom)
	case wal.StopLiveBinding:
		fmt.Fprintf(w, "  kept from seq %d: a preflight whose binding outlives the cut-off (its consumed markers stay)\n", rep.KeptFrom)
	}
}

func newWALStats(stdout io.Writer, file, dataDir *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count the frames, bindings, consumed markers, sessions and idempotency keys, and the file size",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db, err := openWAL(cmd, *file, *dataDir)
			if err != nil {
				return err
			}
			defer db.Close()
			st, err := db.Stats(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONLine(stdout, st)
			}
			return printStats(stdout, st)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the stats as JSON")
	return cmd
}

func printStats(w io.Writer, st wal.Stats) error {
	fmt.Fprintf(w, "wal %s: %d bytes\n", st.Path, st.FileBytes)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if st.Frames == 0 {
		fmt.Fprintf(tw, "frames\t0\n")
	} else {
		fmt.Fprintf(tw, "frames\t%d\tseq %d..%d\n", st.Frames, st.FirstSeq, st.LastSeq)
		fmt.Fprintf(tw, "first frame\t%s\n", st.FirstTime)
		fmt.Fprintf(tw, "last frame\t%s\n", st.LastTime)
	}
	kinds := make([]string, 0, len(st.ByKind))
	for k := range st.ByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(tw, "  %s\t%d\n", k, st.ByKind[k])
	}
	if st.BaseSeq > 0 {
		fmt.Fprintf(tw, "compacted through\tseq %d\n", st.BaseSeq)
	}
	fmt.Fprintf(tw, "format version\t%d\n", st.FormatVersion)
	fmt.Fprintf(tw, "bindings\t%d\n", st.Bindings)
	fmt.Fprintf(tw, "consumed markers\t%d\n", st.ConsumedMarkers)
	fmt.Fprintf(tw, "repair sessions\t%d\n", st.Sessions)
	fmt.Fprintf(tw, "idempotency keys\t%d\n", st.IdempotencyKeys)
	if st.Frames > 0 {
		fmt.Fprintf(tw, "bytes per frame\t%.0f encoded\t%.0f of file\n", st.AvgFrameBytes, st.FileBytesPerFrame)
	}
	return tw.Flush()
}

func newWALExport(stdout io.Writer, file, dataDir *string) *cobra.Command {
	var since string
	var kinds []string
	var afterSeq uint64
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write frames as JSON Lines to stdout, for a SIEM",
		Long: `Write the log's frames to stdout as JSON Lines, one frame per line in seq
order, in the frame's own shape: {"seq","kind","timestamp","audit_id","attrs",
"prev_hash","hash"}. --since takes an RFC 3339 time or a duration ("24h" is
the last 24 hours); --kind (repeatable) keeps those kinds; --after-seq resumes
after the last seq a previous export shipped.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			filter := wal.ExportFilter{AfterSeq: afterSeq}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return err
				}
				filter.Since = t
			}
			for _, k := range kinds {
				kind, err := parseKind(k)
				if err != nil {
					return err
				}
				filter.Kinds = append(filter.Kinds, kind)
			}
			db, err := openWAL(cmd, *file, *dataDir)
			if err != nil {
				return err
			}
			defer db.Close()
			_, err = db.Export(cmd.Context(), stdout, filter)
			return err
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "only frames at or after this RFC 3339 time, or this long ago (e.g. 24h)")
	cmd.Flags().StringSliceVar(&kinds, "kind", nil, "only frames of this kind: preflight, decision, preflight_consumed, outcome, approval (repeatable)")
	cmd.Flags().Uint64Var(&afterSeq, "after-seq", 0, "only frames after this seq")
	return cmd
}

// parseSince reads --since: an RFC 3339 time, or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--since %q is neither an RFC 3339 time nor a positive duration", s)
}

// parseKind reads --kind: a frame kind, with or without "autonomy.".
func parseKind(s string) (string, error) {
	k := s
	if !strings.HasPrefix(k, "autonomy.") {
		k = "autonomy." + k
	}
	if !slices.Contains(walKinds, k) {
		return "", fmt.Errorf("--kind %q is not one of %s", s, strings.Join(walKinds, ", "))
	}
	return k, nil
}

func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %T: %w", v, err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
