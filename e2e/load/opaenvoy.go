package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
)

// Targets for OPA-Envoy, the ext_authz service users run today, measured
// beside the service when -opa-envoy names its binary.
const (
	targetOPA    = "opa-envoy"
	targetOPALog = "opa-envoy, decision log"
	scOPAAllow   = "check allow"
)

// opaPolicy has the shape of the service's gate for the measured request:
// the preflight id header present and the body's kind checked. OPA-Envoy
// parses a JSON body into input.parsed_body.
const opaPolicy = `package envoy.authz

default allow := false

allow if {
	input.attributes.request.http.headers["x-autonomy-preflight-id"] != ""
	input.parsed_body.kind == "tool.echo"
}
`

// opaEnvoy is one running OPA-Envoy with a client on it.
type opaEnvoy struct {
	proc *proc
	ac   authv3.AuthorizationClient
	conn io.Closer
}

// startOPAEnvoy runs bin (opa-envoy-plugin) with opaPolicy, its gRPC
// ext_authz server and its HTTP API on loopback ports, and, when decisionLog
// is set, decision_logs.console on: one JSON line per decision to its
// output, which goes to a file in dir, as the service's log does.
func startOPAEnvoy(ctx context.Context, cl *client, bin, dir string, decisionLog bool) (*opaEnvoy, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	grpcAddr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	cfg := "plugins:\n  envoy_ext_authz_grpc:\n    addr: " + grpcAddr + "\n    path: envoy/authz/allow\n" +
		"decision_logs:\n  console: " + strconv.FormatBool(decisionLog) + "\n"
	cfgPath, policyPath := filepath.Join(dir, "config.yaml"), filepath.Join(dir, "policy.rego")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(policyPath, []byte(opaPolicy), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "opa.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "run", "--server", "--disable-telemetry", "--addr", httpAddr,
		"--config-file", cfgPath, policyPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("load: start %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{}), logs: logPath}
	go func() { cmd.Wait(); close(p.exited) }()
	o := &opaEnvoy{proc: p}
	if o.ac, o.conn, err = cl.dial(grpcAddr); err != nil {
		p.stop()
		return nil, err
	}
	// Ready once a Check is allowed: the plugin serves only after the
	// policy is loaded.
	req := cl.checkRequest("tool.echo", "pf_opaenvoyopaenvoyopaenvoy")
	deadline := time.Now().Add(startTimeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err = check(cctx, o.ac, req, codes.OK, "")
		cancel()
		if err == nil {
			return o, nil
		}
		select {
		case <-p.exited:
			raw, _ := os.ReadFile(logPath)
			o.conn.Close()
			return nil, fmt.Errorf("load: %s exited: %s", bin, raw)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			o.close()
			return nil, fmt.Errorf("load: %s did not allow a Check in time: %w", bin, err)
		}
	}
}

func (o *opaEnvoy) close() error {
	o.conn.Close()
	return o.proc.stop()
}

// allow measures the allow path: the header present, the kind the policy
// wants, so OPA-Envoy evaluates all of its policy.
func (o *opaEnvoy) allow(ctx context.Context, cl *client, conc int, d time.Duration) result {
	return withCPU(o.proc.pid(), func() result {
		return drive(ctx, conc, d, 0, func(ctx context.Context, i int) error {
			return check(ctx, o.ac, cl.checkRequest("tool.echo", "pf_opaenvoyopaenvoyopaenvoy"), codes.OK, "")
		})
	})
}

// freeLoopbackAddr is a loopback TCP address free a moment ago, for a child
// that cannot say which port it bound.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// opaPair is OPA-Envoy without and with its decision log, both running for
// the whole main run so each is measured beside the service.
type opaPair struct {
	plain, logged *opaEnvoy
}

func startOPAPair(ctx context.Context, cl *client, bin, dir string) (*opaPair, error) {
	plain, err := startOPAEnvoy(ctx, cl, bin, filepath.Join(dir, "plain"), false)
	if err != nil {
		return nil, err
	}
	logged, err := startOPAEnvoy(ctx, cl, bin, filepath.Join(dir, "logged"), true)
	if err != nil {
		plain.close()
		return nil, err
	}
	return &opaPair{plain: plain, logged: logged}, nil
}

// measure runs the allow path on both at conc.
func (p *opaPair) measure(ctx context.Context, rep *report, out io.Writer, cl *client, conc int, d time.Duration) {
	rep.add(out, targetOPA, scOPAAllow, p.plain.allow(ctx, cl, conc, d))
	rep.add(out, targetOPALog, scOPAAllow, p.logged.allow(ctx, cl, conc, d))
}

// decisionLogBytes is the size of the logged one's output so far, so a run
// shows its decision log was written.
func (p *opaPair) decisionLogBytes() int64 {
	st, err := os.Stat(p.logged.proc.logs)
	if err != nil {
		return 0
	}
	return st.Size()
}

func (p *opaPair) close() error {
	return errors.Join(p.plain.close(), p.logged.close())
}
