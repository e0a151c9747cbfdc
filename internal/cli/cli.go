package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/gcpace"
	"github.com/contractrefine/autonomy/internal/server"
	"github.com/contractrefine/autonomy/internal/tracing"
	"github.com/contractrefine/autonomy/wal"
)

// Version is set at build time with -ldflags "-X .../internal/cli.Version=v1.2.3".
var Version = "dev"

// exitError carries a process exit code through cobra.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// Main runs the command line and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		fmt.Fprintln(stderr, "autonomy:", err)
		return 1
	}
	return 0
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	var caFile string
	root := &cobra.Command{
		Use:           "autonomy",
		Short:         "ContractRefine: preflight verification and an Envoy ext_authz gate for AI-agent tool calls",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseUnsetValues(cmd, args); err != nil {
				return err
			}
			return trustCA(caFile)
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newServe(stderr), newCheckConfig(stdout), newVersion(stdout), newHealthcheck(stdout),
		newAudit(stdout), newWAL(stdout))
	for _, extra := range extraCommands {
		root.AddCommand(extra(stdout, stderr))
	}
	// The commands that call the service take the CA of its certificate;
	// serve's own clients (the gateway's upstream, the webhook) do not.
	for _, path := range clientCommands {
		if c, _, err := root.Find(path); err == nil && c != root {
			c.Flags().StringVar(&caFile, "ca-file", "", "PEM file of CA certificates to trust, beside the system's, "+
				"for https:// URLs of the service (a tls.cert_file from a private CA); SSL_CERT_FILE replaces the system's")
		}
	}
	strictCompletion(root)
	return root
}

// clientCommands are the commands that call a running service over HTTP.
var clientCommands = [][]string{{"healthcheck"}, {"preflight"}, {"audit"}, {"approvals", "list"}, {"approve"}, {"demo", "contract-refine"}}

// strictCompletion makes "completion" without a shell, or with one cobra
// has no script for (tcsh), an error naming the shells, rather than help
// and exit 0: a script that pipes it into a file would install nothing.
func strictCompletion(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		var shells []string
		for _, sub := range c.Commands() {
			shells = append(shells, sub.Name())
		}
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("completion: name a shell: one of %s", strings.Join(shells, ", "))
			}
			return fmt.Errorf("completion: no script for shell %q: one of %s", args[0], strings.Join(shells, ", "))
		}
	}
}

// extraCommands are subcommands defined in other files of this package.
var extraCommands []func(stdout, stderr io.Writer) *cobra.Command

// configFlags are the serve flags of README.md#configuration.
type configFlags struct {
	file                              string
	httpAddr, grpcAddr, dataDir, mode string
	bundle, upstream, gatewayAddr     string
	etcdEndpoints, replicaID          string
}

func (f *configFlags) register(cmd *cobra.Command, all bool) {
	cmd.Flags().StringVar(&f.file, "config", "", "YAML configuration file")
	cmd.Flags().StringVar(&f.bundle, "bundle", "", "policy bundle directory (default: the embedded bundle)")
	if !all {
		return
	}
	cmd.Flags().StringVar(&f.httpAddr, "http-addr", "", "HTTP API listen address (default 127.0.0.1:8181)")
	cmd.Flags().StringVar(&f.grpcAddr, "grpc-addr", "", "gRPC ext_authz listen address, or unix:/path (default 127.0.0.1:9191)")
	cmd.Flags().StringVar(&f.dataDir, "data-dir", "", "data directory holding wal.db (default ./data)")
	cmd.Flags().StringVar(&f.mode, "mode", "", "contract_refine.mode: disabled, advisory or enforce (default advisory)")
	cmd.Flags().StringVar(&f.upstream, "upstream", "", "tool runtime URL for the built-in gateway")
	cmd.Flags().StringVar(&f.gatewayAddr, "gateway-addr", "", "built-in gateway listen address (with --upstream)")
	cmd.Flags().StringVar(&f.etcdEndpoints, "etcd-endpoints", "", "etcd endpoints URL[,URL...]: share state with other replicas (store.etcd.endpoints)")
	cmd.Flags().StringVar(&f.replicaID, "replica-id", "", "this replica's name in frames and the shared store (default: the host name)")
}

// pathFlags name a file or directory: given as "" (an unset template
// variable, say) they would silently mean the default one.
var pathFlags = map[string]bool{"config": true, "data-dir": true, "bundle": true, "ca-file": true, "upstream": true}

// trustCA makes the commands that call the service (healthcheck, preflight,
// audit, approvals, approve, demo) trust the CA certificates in file
// beside the system's: they all go through http.DefaultTransport. "" keeps
// the system's alone.
func trustCA(file string) error {
	if file == "" {
		return nil
	}
	pem, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("--ca-file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("--ca-file %s: no PEM certificate in it", file)
	}
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return errors.New("--ca-file: the HTTP transport is not the standard one")
	}
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return nil
}

// refuseUnsetValues refuses, on every command, a path flag given as "" and
// a duration flag that is not positive (a timeout of 0s fails at once, a
// retention of 0s would remove every frame): leave the flag out for its
// default.
func refuseUnsetValues(cmd *cobra.Command, _ []string) error {
	var errs []error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		switch {
		case pathFlags[f.Name] && f.Value.String() == "":
			errs = append(errs, fmt.Errorf("--%s: must not be empty", f.Name))
		case f.Value.Type() == "duration":
			if d, err := time.ParseDuration(f.Value.String()); err == nil && d <= 0 {
				errs = append(errs, fmt.Errorf("--%s must be positive, got %s", f.Name, f.Value))
			}
		}
	})
	return errors.Join(errs...)
}

// load reads the file, applies the flags that were set and validates.
func (f *configFlags) load(cmd *cobra.Command) (config.Config, error) {
	cfg, err := config.Load(f.file)
	if err != nil {
		return cfg, err
	}
	var flagErrs []error
	set := func(name string, dst *string, v string, check func(string) error) {
		fl := cmd.Flags().Lookup(name)
		if fl == nil || !fl.Changed {
			return
		}
		// A bad flag value is named as the flag, not as the file's key.
		if check != nil {
			if err := check(v); err != nil {
				flagErrs = append(flagErrs, fmt.Errorf("--%s: %w", name, err))
			}
		}
		*dst = v
	}
	set("http-addr", &cfg.HTTPAddr, f.httpAddr, config.CheckListenAddr)
	set("grpc-addr", &cfg.GRPCAddr, f.grpcAddr, config.CheckListenAddr)
	set("data-dir", &cfg.DataDir, f.dataDir, nil)
	set("bundle", &cfg.Bundle, f.bundle, nil) // "" is refused: leave the flag out for the file's bundle or the embedded one
	set("upstream", &cfg.Upstream, f.upstream, nil)
	set("gateway-addr", &cfg.GatewayAddr, f.gatewayAddr, config.CheckListenAddr)
	set("replica-id", &cfg.ReplicaID, f.replicaID, config.CheckReplicaID)
	if fl := cmd.Flags().Lookup("etcd-endpoints"); fl != nil && fl.Changed {
		eps, err := config.ParseEndpoints(f.etcdEndpoints)
		if err != nil {
			flagErrs = append(flagErrs, fmt.Errorf("--etcd-endpoints: %w", err))
		}
		cfg.Store.Etcd.Endpoints = eps
	}
	if len(flagErrs) > 0 {
		return cfg, errors.Join(flagErrs...)
	}
	// The pairing rule is the file's, but a pair given by flags is named as
	// flags, so the message says what to type.
	if up, gw := cmd.Flags().Lookup("upstream"), cmd.Flags().Lookup("gateway-addr"); up != nil && gw != nil &&
		(up.Changed || gw.Changed) && (cfg.Upstream == "") != (cfg.GatewayAddr == "") {
		return cfg, errors.New("--upstream and --gateway-addr go together (upstream and gateway_addr in the file): give both, or neither")
	}
	if fl := cmd.Flags().Lookup("mode"); fl != nil && fl.Changed {
		m, err := config.ParseMode(f.mode)
		if err != nil {
			return cfg, fmt.Errorf("--mode: %w", err)
		}
		cfg.ContractRefine.Mode = m
	}
	if err := cfg.Validate(); err != nil {
		if f.file != "" {
			return cfg, fmt.Errorf("config %s: %w", f.file, err)
		}
		return cfg, err
	}
	return cfg, nil
}

// NewLogger returns the JSON logger at the configured level. Lines logged
// with a context that holds a span carry its trace_id and span_id.
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(tracing.NewLogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})))
}

func newServe(stderr io.Writer) *cobra.Command {
	var f configFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the preflight API, the ext_authz gate and (with --upstream) the built-in gateway",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.load(cmd)
			if err != nil {
				return err
			}
			log := NewLogger(stderr, cfg.Log.Level)
			if err := serve(cmd.Context(), cfg, log); err != nil {
				// Log pipelines read the JSON lines: why serve ended is one
				// too, beside the plain line every command prints.
				log.Error("serve failed", "err", err)
				return err
			}
			return nil
		},
	}
	f.register(cmd, true)
	return cmd
}

// serve listens, opens the service and runs it until ctx ends or a
// signal stops it.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	defer gcpace.Start(gcpace.DefaultHeadroom).Stop()
	// New binds the listeners after it has read the files and the bundle
	// and before it opens the WAL (docs/OPERATIONS.md).
	srv, err := server.New(ctx, cfg, server.Options{Logger: log, Version: Version, Listen: true})
	if err != nil {
		return err
	}
	return runServer(ctx, srv, log)
}

// runServer runs srv, reloading its bundle on SIGHUP; it is a variable so
// other wiring can wrap it.
var runServer = func(ctx context.Context, srv *server.Server, log *slog.Logger) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go srv.ServeReloads(ctx, hup)
	return srv.Run(ctx)
}

func newCheckConfig(stdout io.Writer) *cobra.Command {
	var f configFlags
	cmd := &cobra.Command{
		Use:   "check-config",
		Short: "Validate the configuration and the policy bundle, exit 0 when both are good",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.load(cmd)
			if err != nil {
				return err
			}
			b, err := server.LoadBundle(cmd.Context(), &cfg)
			if err != nil {
				return err
			}
			// A policy that fails on every probe input loads, but serve is
			// unready with it and answers every call 503.
			if err := b.Decides(cmd.Context(), string(cfg.ContractRefine.Mode), cfg.Gate.Path); err != nil {
				return fmt.Errorf("bundle %s: %w", b.Source(), err)
			}
			if err := server.CheckSecurity(&cfg); err != nil {
				return err
			}
			if err := wal.CheckDir(cfg.DataDir); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "configuration ok: mode %s, bundle %s (revision %s, %d capabilities)\n",
				cfg.ContractRefine.Mode, b.Source(), b.Revision(), len(b.Governance().Capabilities))
			if cfg.StoreBackend() == config.BackendEtcd {
				fmt.Fprintf(stdout, "store: etcd at %s, prefix %q, replica %s; WAL in %s\n",
					strings.Join(cfg.Store.Etcd.Endpoints, ","), cfg.Store.Etcd.Prefix, cfg.Replica(), cfg.DataDir)
			} else {
				fmt.Fprintf(stdout, "store: bbolt, WAL in %s\n", cfg.DataDir)
			}
			for _, note := range b.Unenforced() {
				fmt.Fprintln(stdout, "note:", note)
			}
			for _, w := range b.Warnings() {
				fmt.Fprintln(stdout, "warning:", w)
			}
			return nil
		},
	}
	f.register(cmd, true)
	return cmd
}

func newVersion(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			fmt.Fprintf(stdout, "autonomy %s (%s %s/%s)\n", Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}

// Run is Main for cmd/autonomy.
func Run() { os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr)) }
