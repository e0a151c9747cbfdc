package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/contractrefine/autonomy/internal/toolruntime"
)

const (
	defaultAddr = "127.0.0.1:8080"
	// shutdownGrace covers the longest tool call (tool.sleep, 5s) with room
	// to spare, and stays under the 10s Docker and 30s Kubernetes give a
	// container between SIGTERM and SIGKILL.
	shutdownGrace = 8 * time.Second
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// run is main without the process: it returns the exit code, so tests can
// drive it with their own context, arguments and output.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "healthcheck" {
		return healthcheck(ctx, args[1:], stderr)
	}
	return serve(ctx, args, stdout, stderr)
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolruntime", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", defaultAddr, "address to listen on (host:port; port 0 picks one)")
	logFile := fs.String("log-file", "", "also append the JSON log lines to this file")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "toolruntime: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}

	out := stdout
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintf(stderr, "toolruntime: open log file: %v\n", err)
			return exitError
		}
		defer f.Close()
		out = io.MultiWriter(stdout, f)
	}
	logger := slog.New(slog.NewJSONHandler(out, nil))

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		logger.Error("listen", "addr", *addr, "err", err)
		return exitError
	}
	srv := &http.Server{
		Handler:           toolruntime.New(toolruntime.Options{Logger: logger}),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("listening", "addr", ln.Addr().String())

	select {
	case err := <-served:
		logger.Error("serve", "err", err)
		return exitError
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		logger.Error("shutdown", "err", err)
		return exitError
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		logger.Error("serve", "err", err)
		return exitError
	}
	logger.Info("stopped")
	return exitOK
}

// healthcheck exits 0 only if the URL answers 200 within the timeout.
func healthcheck(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("toolruntime healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", "http://"+defaultAddr+"/healthz", "URL that must answer 200")
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		fmt.Fprintf(stderr, "toolruntime healthcheck: %v\n", err)
		return exitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "toolruntime healthcheck: %v\n", err)
		return exitError
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "toolruntime healthcheck: %s answered %s\n", *url, resp.Status)
		return exitError
	}
	return exitOK
}
