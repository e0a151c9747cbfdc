package submit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/submit"
	"github.com/contractrefine/autonomy/wal"
)

// clock is the time of the API's test requests, before their deadlines.
func clock() time.Time { return time.Date(2026, 6, 23, 14, 30, 5, 0, time.UTC) }

func newService(t *testing.T, edit func(*submit.Options)) (*submit.Service, *wal.DB) {
	t.Helper()
	b, err := bundle.Load(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	db, err := wal.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var n atomic.Int64
	o := submit.Options{Verifier: preflight.NewVerifier(preflight.Options{Chain: db, Now: clock}), Store: db,
		Bundle: func() submit.Bundle { return b }, BindingWindow: time.Minute, MaxRepairAttempts: 1, Now: clock,
		NewPreflightID: func() string { return fmt.Sprintf("pf_submit%012d", n.Add(1)) },
		NewAuditID:     func() string { return fmt.Sprintf("au_submit%012d", n.Add(1)) }}
	if edit != nil {
		edit(&o)
	}
	return submit.New(o), db
}

const body = `{"intent":{"summary":"s","plan_hash":"plan-1"},` +
	`"plan":{"steps":[{"id":"s1","kind":"tool.echo","zone":"default","args":{"msg":"hi"}}]},` +
	`"context":{"actor":{"id":"user:a","session_id":"sess-1"}}}`

// TestErrors: a submission that gets no decision is a typed error with its
// status, code, JSON Pointer and whether a retry may succeed.
func TestErrors(t *testing.T) {
	tests := map[string]struct {
		edit      func(*submit.Options)
		body      string
		status    int
		code      string
		path      string
		retryable bool
	}{
		"disabled":       {edit: func(o *submit.Options) { o.Disabled = true }, body: body, status: http.StatusServiceUnavailable, code: preflight.CodePreflightDisabled},
		"not JSON":       {body: `{`, status: http.StatusBadRequest, code: preflight.CodeMalformedRequest},
		"no bundle":      {edit: func(o *submit.Options) { o.Bundle = func() submit.Bundle { return nil } }, body: body, status: http.StatusServiceUnavailable, code: preflight.CodeVerifierUnavailable, retryable: true},
		"bad envelope":   {body: `{"intent":{"summary":"s"},"plan":{"steps":[]},"context":{"actor":{"id":"a"},"request":{"contractVersion":"nope"}}}`, status: http.StatusBadRequest, code: preflight.CodeUnsupportedVersion, path: "/context/request/contractVersion"},
		"long plan hash": {body: `{"intent":{"summary":"s","plan_hash":"` + string(make([]byte, 0)) + fmt.Sprintf("%05000d", 0) + `"},"plan":{"steps":[]},"context":{"actor":{"id":"a"}}}`, status: http.StatusBadRequest, code: preflight.CodeMalformedRequest, path: "/intent/plan_hash"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			svc, db := newService(t, tc.edit)
			ans, e := svc.Submit(context.Background(), submit.Submission{Body: []byte(tc.body)})
			if e == nil {
				t.Fatalf("answer %s, want an error", ans.Body)
			}
			if e.Status != tc.status || e.Code() != tc.code || e.Fields[0].Path != tc.path || e.Retryable != tc.retryable {
				t.Errorf("error %d %s at %q retryable %v, want %d %s at %q retryable %v",
					e.Status, e.Code(), e.Fields[0].Path, e.Retryable, tc.status, tc.code, tc.path, tc.retryable)
			}
			if seq, _ := db.Head(); seq != 0 {
				t.Errorf("%d frames written for a refused submission", seq)
			}
		})
	}
}

// TestRecordsAndReplays: a real run is recorded (binding, decision bytes,
// one session attempt); a dry run records nothing; the same idempotency
// key and body replays the recorded bytes.
func TestRecordsAndReplays(t *testing.T) {
	svc, db := newService(t, nil)
	ctx := context.Background()
	dry, e := svc.Submit(ctx, submit.Submission{Body: []byte(body), DryRun: true})
	if e != nil || dry.Decision.PreflightID != "" {
		t.Fatalf("dry run: %v, %+v", e, dry)
	}
	if seq, _ := db.Head(); seq != 0 {
		t.Fatalf("a dry run wrote %d frames", seq)
	}
	ans, e := svc.Submit(ctx, submit.Submission{Body: []byte(body)})
	if e != nil {
		t.Fatal(e)
	}
	stored, err := db.Decision(ctx, ans.Decision.PreflightID)
	if err != nil || string(stored) != string(ans.Body) {
		t.Fatalf("stored decision %s, %v; want the answer %s", stored, err, ans.Body)
	}
	key, _ := (&preflight.Request{Intent: preflight.Intent{PlanHash: "plan-1"},
		Context: preflight.Context{Actor: preflight.Actor{ID: "user:a", SessionID: "sess-1"}}}).SessionKey("")
	if s, err := db.Session(ctx, key); err != nil || s.Attempts != 1 {
		t.Errorf("session after one submission: %+v, %v", s, err)
	}
	// A request with an envelope and an idempotency key, as the API's tests send.
	idem, err := os.ReadFile("../../internal/httpapi/testdata/requests/refund_pass.json")
	if err != nil {
		t.Fatal(err)
	}
	first, e := svc.Submit(ctx, submit.Submission{Body: idem})
	if e != nil {
		t.Fatal(e)
	}
	again, e := svc.Submit(ctx, submit.Submission{Body: idem})
	if e != nil || !again.Replayed || string(again.Body) != string(first.Body) {
		t.Fatalf("retry under the same key: %+v, %v; want the first answer replayed", again, e)
	}
}

// lockingStore is a log whose repair-session lock fails with err, or,
// without one, waits until the caller gives up (another holds it).
type lockingStore struct {
	*wal.DB
	err error
}

func (s lockingStore) LockSession(ctx context.Context, key string) (func(), error) {
	if s.err != nil {
		return nil, s.err
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSessionLockRefused: a submission whose repair session cannot be
// locked is a retryable 503 verifier-unavailable that records nothing,
// and its message says why: the store could not be asked, or others held
// the lock until the wait ran out.
func TestSessionLockRefused(t *testing.T) {
	tests := map[string]struct {
		err  error
		want string
	}{
		"store unreachable": {err: errors.New("etcd unavailable"), want: "The state store could not be reached"},
		"lock held":         {want: "Other submissions of this repair session are being decided"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			svc, db := newService(t, func(o *submit.Options) {
				o.Store = lockingStore{DB: o.Store.(*wal.DB), err: tc.err}
				o.SessionWait = time.Millisecond
			})
			_, e := svc.Submit(context.Background(), submit.Submission{Body: []byte(body), Arrived: time.Now()})
			if e == nil || e.Status != http.StatusServiceUnavailable || e.Code() != preflight.CodeVerifierUnavailable || !e.Retryable {
				t.Fatalf("error %+v, want a retryable 503 verifier-unavailable", e)
			}
			if !strings.HasPrefix(e.Fields[0].Message, tc.want) {
				t.Errorf("message %q, want it to start %q", e.Fields[0].Message, tc.want)
			}
			if seq, _ := db.Head(); seq != 0 {
				t.Errorf("%d frames written for a refused submission", seq)
			}
		})
	}
}
