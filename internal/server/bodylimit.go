package server

import (
	"net/http"
	"sync"

	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/httpapi"
	"github.com/contractrefine/autonomy/preflight"
)

// bodyLimiter bounds the requests with a body that are read and decided
// at once, and the body bytes they reserve between them: each reserves
// its Content-Length, or http.max_body_bytes when it declares none
// (chunked). http.max_body_bytes bounds one body; without this, 500 slow
// connections each sending 900 KB of a body that never ends held 1.07 GB.
type bodyLimiter struct {
	mu       sync.Mutex
	requests int
	bytes    int64
	maxReqs  int
	maxBytes int64
	maxBody  int64
	onError  func(code string)
}

func newBodyLimiter(c *config.Config, onError func(string)) *bodyLimiter {
	return &bodyLimiter{maxReqs: c.HTTP.MaxBodyRequests, maxBytes: c.HTTP.MaxBytesInFlight,
		maxBody: c.HTTP.MaxBodyBytes, onError: onError}
}

// wrap refuses a request with a body past the bounds with 503 overloaded
// and Retry-After, before any of its body is read.
func (l *bodyLimiter) wrap(next http.Handler) http.Handler { return l.guard(next, true, true) }

// wrapBytes is wrap bounding the body bytes only: a gateway request holds
// its reservation while the tool runs upstream, so counting it against
// http.max_body_requests would bound how many tool calls run at once.
func (l *bodyLimiter) wrapBytes(next http.Handler) http.Handler { return l.guard(next, false, true) }

// wrapCount is wrap bounding the count only, for the API routes behind
// the gateway, whose bytes wrapBytes has reserved already.
func (l *bodyLimiter) wrapCount(next http.Handler) http.Handler { return l.guard(next, true, false) }

func (l *bodyLimiter) guard(next http.Handler, counted, reserved bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		var n int64
		if reserved {
			n = l.maxBody
			if r.ContentLength > 0 && r.ContentLength < n {
				n = r.ContentLength
			}
		}
		if !l.acquire(n, counted) {
			if l.onError != nil {
				l.onError(preflight.CodeOverloaded)
			}
			w.Header().Set("Retry-After", "1")
			httpapi.WriteError(w, http.StatusServiceUnavailable, preflight.CodeOverloaded,
				"Too many requests with a body are being read or decided; retry shortly.")
			return
		}
		defer l.release(n, counted)
		next.ServeHTTP(w, r)
	})
}

func (l *bodyLimiter) acquire(n int64, counted bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if (counted && l.requests >= l.maxReqs) || l.bytes+n > l.maxBytes {
		return false
	}
	if counted {
		l.requests++
	}
	l.bytes += n
	return true
}

func (l *bodyLimiter) release(n int64, counted bool) {
	l.mu.Lock()
	if counted {
		l.requests--
	}
	l.bytes -= n
	l.mu.Unlock()
}
