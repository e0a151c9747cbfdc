package server

import (
	"context"
	"time"

	"github.com/contractrefine/autonomy/internal/httpapi"
	"github.com/contractrefine/autonomy/internal/webhook"
	"github.com/contractrefine/autonomy/preflight"
)

// pendingApprovals counts what autonomy_approvals_pending reports: on etcd,
// the approvals every replica recorded, read from the store; on bbolt, the
// WAL's. 0 until the store is open.
func (s *Server) pendingApprovals() (float64, error) {
	if s.etcd != nil {
		n, err := s.etcd.PendingApprovals(context.Background(), s.now())
		return float64(n), err
	}
	if s.db == nil {
		return 0, nil
	}
	n, err := s.db.PendingApprovals(s.now())
	return float64(n), err
}

// startNotifier starts the approvals.webhook_url notifier, when one is
// configured, and returns the hook the API calls for a preflight with
// pending approvals.
func (s *Server) startNotifier() func(ctx context.Context, b *preflight.Binding, at time.Time) {
	a := s.cfg.Approvals
	if a.WebhookURL == "" {
		return nil
	}
	s.notifier = webhook.New(webhook.Options{URL: a.WebhookURL, Timeout: a.WebhookTimeout, Retries: a.WebhookRetries,
		Logger: s.log, Delivered: s.obs.metrics.WebhookDelivery})
	return func(_ context.Context, b *preflight.Binding, at time.Time) {
		s.notifier.Notify(httpapi.NoticeOf(b, at))
	}
}

// stopNotifier stops the notifier; what is still queued is dropped.
func (s *Server) stopNotifier() {
	if s.notifier != nil {
		s.notifier.Close()
	}
}
