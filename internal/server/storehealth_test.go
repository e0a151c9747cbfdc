package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/etcdtest"
)

// TestHealthFollowsEtcdAtOnce: with the background probe off, grpc.health.v1
// (what Envoy's and Kubernetes' checks read) turns NOT_SERVING as soon as a
// call finds etcd away, and SERVING again once a call finds it back, without
// waiting for a probe period: the calls routed meanwhile could only be
// refused.
func TestHealthFollowsEtcdAtOnce(t *testing.T) {
	c := etcdtest.StartT(t, etcdtest.Options{})
	e := obsStart(t, func(cfg *config.Config) {
		cfg.Store.Etcd.Endpoints = c.Endpoints()
		cfg.Store.Etcd.RequestTimeout, cfg.Store.Etcd.DialTimeout = 500*time.Millisecond, 500*time.Millisecond
	}, Options{ReadinessInterval: -1})
	health := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := e.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: authzServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	waitStatus := func(want int, after string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if status, _ := e.get(t, "/readyz"); status == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz not %d within 30s of %s", want, after)
			}
		}
	}
	waitStatus(http.StatusOK, "the start")
	if got := health(); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health once ready: %v", got)
	}

	c.Members[0].Stop()
	if a := e.mustCheck(t, toolBody("tool.echo", map[string]any{"msg": "hi"}), nil); a.Status != http.StatusServiceUnavailable {
		t.Fatalf("a Check with etcd stopped: %+v, want 503", a)
	}
	if got := health(); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health after a call found etcd away: %v, want NOT_SERVING", got)
	}

	if err := c.Members[0].Start(); err != nil {
		t.Fatal(err)
	}
	// No /readyz from here: only calls, which find etcd back.
	for deadline := time.Now().Add(30 * time.Second); health() != healthpb.HealthCheckResponse_SERVING; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("health not SERVING within 30s of etcd's return, calls reaching it")
		}
		e.check(context.Background(), toolBody("tool.echo", map[string]any{"msg": "hi"}), nil)
	}
}
