// Package webhook delivers notifications of new pending approvals to an
// operator's endpoint (approvals.webhook_url), so they can be routed to
// chat or a pager. Delivery is best effort and off the decision path: a
// notification is queued and sent by one background worker, with a
// timeout per attempt and a bounded number of retries, and nothing a
// delivery does (or fails to do) changes a decision.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Options configures a Notifier. Zero values mean the defaults.
type Options struct {
	// URL receives each notification as a JSON POST.
	URL string
	// Timeout bounds each attempt (default 5 s).
	Timeout time.Duration
	// Retries is how many times a failed attempt is tried again.
	Retries int
	// Backoff is the wait before the first retry, doubled before each
	// next one (default 500 ms).
	Backoff time.Duration
	// QueueSize bounds the notifications waiting to be sent (default
	// 1024); one that finds the queue full is dropped and logged.
	QueueSize int
	// Client sends the requests; nil is a client that follows no redirect.
	Client *http.Client
	Logger *slog.Logger
	// Delivered, when set, is told the outcome of every notification:
	// delivered, failed (every attempt failed) or dropped.
	Delivered func(result string)
}

// Notifier sends notifications in the background. It is safe for
// concurrent use.
type Notifier struct {
	o      Options
	queue  chan []byte
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// New starts a Notifier; Close stops it.
func New(o Options) *Notifier {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Backoff <= 0 {
		o.Backoff = 500 * time.Millisecond
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 1024
	}
	if o.Client == nil {
		o.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{o: o, queue: make(chan []byte, o.QueueSize)}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(1)
	go n.run()
	return n
}

// Notify queues v, encoded as JSON, for delivery. It never blocks.
func (n *Notifier) Notify(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		n.o.Logger.Error("webhook notification cannot be encoded", "err", err)
		n.result("dropped")
		return
	}
	select {
	case <-n.ctx.Done():
		n.result("dropped")
	case n.queue <- b:
	default:
		n.o.Logger.Warn("webhook queue full; notification dropped", "queue_size", n.o.QueueSize)
		n.result("dropped")
	}
}

// Close stops the worker: the attempt under way is cancelled and what is
// still queued is dropped.
func (n *Notifier) Close() {
	n.once.Do(func() {
		n.cancel()
		n.wg.Wait()
	})
}

func (n *Notifier) run() {
	defer n.wg.Done()
	for {
		select {
		case <-n.ctx.Done():
			return
		case b := <-n.queue:
			n.deliver(b)
		}
	}
}

// deliver sends b, retrying a transport error or an answer other than 2xx.
func (n *Notifier) deliver(b []byte) {
	wait := n.o.Backoff
	for attempt := 0; ; attempt++ {
		err := n.send(b)
		if err == nil {
			n.result("delivered")
			return
		}
		if attempt >= n.o.Retries || n.ctx.Err() != nil {
			n.o.Logger.Warn("webhook notification not delivered", "attempts", attempt+1, "err", err)
			n.result("failed")
			return
		}
		select {
		case <-n.ctx.Done():
			n.result("failed")
			return
		case <-time.After(wait):
		}
		wait *= 2
	}
}

func (n *Notifier) send(b []byte) error {
	ctx, cancel := context.WithTimeout(n.ctx, n.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.o.URL, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.o.Client.Do(req)
	if err != nil {
		return redactURL(err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook answered %d", resp.StatusCode)
	}
	return nil
}

// redactURL keeps the webhook's URL out of a transport error, which is
// logged: chat webhooks carry their secret in the path or the query. The
// error names the scheme and host only.
func redactURL(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	where := "the webhook"
	if u, perr := url.Parse(ue.URL); perr == nil {
		where = u.Scheme + "://" + u.Host
	}
	return fmt.Errorf("%s %s: %w", ue.Op, where, ue.Err)
}

func (n *Notifier) result(r string) {
	if n.o.Delivered != nil {
		n.o.Delivered(r)
	}
}
