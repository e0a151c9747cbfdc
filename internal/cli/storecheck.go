package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/display"
	"github.com/contractrefine/autonomy/internal/etcdstore"
	"github.com/contractrefine/autonomy/wal"
)

func init() {
	extraWALCommands = append(extraWALCommands, newWALCheckStore)
}

func newWALCheckStore(stdout io.Writer, file, dataDir *string) *cobra.Command {
	var endpoints, replica, prefix string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check-store",
		Short: "Check the shared etcd store against this replica's WAL, both ways; exit 1 on a mismatch",
		Long: `Compare what etcd holds with one replica's WAL (run it on the stopped
replica's data directory, or a copy of it, while the others serve):

  records in etcd this replica wrote that name frames its WAL lacks: frame
  copies of a seq it does not have (or with another hash), bindings without
  their autonomy.preflight frame, consumed markers without their
  autonomy.preflight_consumed frame;
  frames of the WAL younger than store.etcd.record_ttl whose state etcd
  lacks: no copy, no binding, no marker of the consuming request.

The etcd settings come from --config (store.etcd.*); --etcd-endpoints,
--prefix and --replica-id override them. The replica is --replica-id, else replica_id
from --config, else the one the WAL's newest frame names, else the host
name; one that is not the WAL's is refused. Every etcd read is made at one
revision.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(*file)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("etcd-endpoints") {
				if cfg.Store.Etcd.Endpoints, err = config.ParseEndpoints(endpoints); err != nil {
					return fmt.Errorf("--etcd-endpoints: %w", err)
				}
			}
			if cmd.Flags().Changed("prefix") {
				if err := config.CheckPrefix(prefix); err != nil {
					return fmt.Errorf("--prefix: %w", err)
				}
				cfg.Store.Etcd.Prefix = prefix
			}
			if len(cfg.Store.Etcd.Endpoints) == 0 {
				return fmt.Errorf("no etcd endpoints: give --etcd-endpoints or store.etcd.endpoints in --config")
			}
			if cmd.Flags().Changed("replica-id") {
				if err := config.CheckReplicaID(replica); err != nil {
					return fmt.Errorf("--replica-id: %w", err)
				}
				cfg.ReplicaID = replica
			}
			tc, err := cfg.Store.Etcd.TLS.ClientConfig()
			if err != nil {
				return err
			}
			db, err := openWAL(cmd, *file, *dataDir)
			if err != nil {
				return err
			}
			defer db.Close()
			// The replica a log belongs to is the one its frames name:
			// checked under another name, its records would all look
			// absent and the check would pass on nothing.
			if named, err := logReplica(db); err != nil {
				return err
			} else if named != "" && cfg.ReplicaID == "" {
				cfg.ReplicaID = named
			} else if named != "" && named != cfg.ReplicaID {
				return fmt.Errorf("the WAL's newest frame names replica %q, not %q: give --replica-id %s", named, cfg.ReplicaID, named)
			}
			e := &cfg.Store.Etcd
			st, err := etcdstore.Open(etcdstore.Options{Endpoints: e.Endpoints, Prefix: e.Prefix, DialTimeout: e.DialTimeout,
				RequestTimeout: e.RequestTimeout, TLS: tc, RecordTTL: e.RecordTTL, Replica: cfg.Replica(), Log: db, Inspect: true})
			if err != nil {
				return err
			}
			defer st.Close()
			rep, err := st.Check(cmd.Context(), time.Now())
			if err != nil {
				return err
			}
			if asJSON {
				if err := writeJSONLine(stdout, struct {
					OK bool `json:"ok"`
					etcdstore.CheckReport
				}{rep.OK(), rep}); err != nil {
					return err
				}
			} else if err := printCheckStore(stdout, &rep); err != nil {
				return err
			}
			if !rep.OK() {
				return exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&endpoints, "etcd-endpoints", "", "etcd endpoints URL[,URL...] (default: store.etcd.endpoints from --config)")
	cmd.Flags().StringVar(&prefix, "prefix", "", "the replicas' etcd key prefix (default: store.etcd.prefix from --config, else "+config.DefaultEtcdPrefix+")")
	cmd.Flags().StringVar(&replica, "replica-id", "", "the replica whose WAL this is (default: replica_id from --config, else the one its newest frame names, else the host name)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func printCheckStore(w io.Writer, rep *etcdstore.CheckReport) error {
	fmt.Fprintf(w, "wal check-store: replica %s, prefix %s, etcd revision %d\n", display.Text(rep.Replica), display.Text(rep.Prefix), rep.Revision)
	fmt.Fprintf(w, "  WAL: %d frames since %s; etcd: %d frame copies, %d bindings, %d consumed markers of this replica\n",
		rep.Frames, rep.Since.Format(time.RFC3339), rep.Copies, rep.Bindings, rep.Markers)
	if rep.Frames > 0 && rep.Copies == 0 && rep.Bindings == 0 && rep.Markers == 0 {
		fmt.Fprintf(w, "  etcd holds nothing of replica %s under %s: if the replica ran, its prefix is another (--prefix, store.etcd.prefix) or it is another replica (--replica-id)\n",
			display.Text(rep.Replica), display.Text(rep.Prefix))
	}
	if rep.Pending > 0 {
		fmt.Fprintf(w, "  %d frame copies past the log's head, left by a kill during a commit: the replica takes them up or deletes them when it opens\n", rep.Pending)
	}
	if rep.OK() {
		fmt.Fprintln(w, "  ok: etcd and the WAL agree")
		return nil
	}
	fmt.Fprintf(w, "  MISMATCH: %d problems\n", len(rep.Problems))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  PROBLEM\tSEQ\tKIND\tAUDIT_ID\tPREFLIGHT_ID\tKEY")
	for _, p := range rep.Problems {
		seq := "-"
		if p.Seq != 0 {
			seq = fmt.Sprint(p.Seq)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", p.Problem, seq, orDash(p.Kind), orDash(display.Text(p.AuditID)),
			orDash(display.Text(p.PreflightID)), orDash(display.Text(p.Key)))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// logReplica is the replica the log's newest frame names ("" for an empty
// log or a frame written without one).
func logReplica(db *wal.DB) (string, error) {
	seq, _ := db.Head()
	if seq == 0 {
		return "", nil
	}
	var f wal.Frame
	if err := db.View(func(tx *wal.Tx) error {
		var err error
		f, err = tx.Frame(seq)
		return err
	}); err != nil {
		return "", err
	}
	var named string
	if _, err := f.Attr(wal.AttrReplica, &named); err != nil {
		return "", fmt.Errorf("frame %d: %w", seq, err)
	}
	return named, nil
}
