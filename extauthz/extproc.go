package extauthz

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/wal"
)

// Judge judges a gated call's response; *binding.Gate implements it.
type Judge interface {
	Outcome(ctx context.Context, x *binding.Exchange) binding.Verdict
}

var _ Judge = (*binding.Gate)(nil)

// DefaultProcessTimeout bounds one ext_proc stream when ProcessorOptions
// sets no timeout.
const DefaultProcessTimeout = 30 * time.Second

// Errors that end a stream without a judged response; the outcome frame
// names them as the reason it could not be judged.
var (
	// ErrStreamTimeout: the stream did not reach the response body in time.
	ErrStreamTimeout = errors.New("extauthz: ext_proc stream timed out before the response was judged")
	// ErrStreamBroken: the stream ended before the response was judged.
	ErrStreamBroken = errors.New("extauthz: ext_proc stream ended before the response was judged")
	// ErrBodyNotBuffered: a response body came in chunks; the filter must
	// buffer it (response_body_mode: BUFFERED), or the response would be
	// released before it is judged.
	ErrBodyNotBuffered = errors.New("extauthz: the response body was not buffered")
	// ErrResponseTooLarge: the response body is over the processor's limit.
	ErrResponseTooLarge = errors.New("extauthz: response body over the limit")
	// ErrOutOfOrder: a message Envoy does not send at that point of a
	// stream (the request's or the response's headers again, a request
	// message once the response has begun, the response's body before its
	// headers, its trailers before it was judged):
	// which request the response answers, or what it holds, is no longer
	// certain.
	ErrOutOfOrder = errors.New("extauthz: ext_proc message out of order")
)

// ProcessorOptions configures a Processor. Zero values mean the defaults.
type ProcessorOptions struct {
	// Timeout bounds a stream from its first message to the answer on the
	// response; past it the response is judged unverified and the stream
	// ends with DEADLINE_EXCEEDED, which Envoy (failure_mode_allow: false)
	// answers with an error, never the tool's response.
	Timeout time.Duration
	// MaxBodyBytes bounds the request and response bodies read; zero is no
	// limit beyond gRPC's message size.
	MaxBodyBytes int64
}

// Processor implements envoy.service.ext_proc.v3.ExternalProcessor (SPEC
// §12): it reads the request Envoy let through, then the tool's response,
// and answers the response with what the gate's Outcome decides: pass it,
// pass it with the warning header, or replace it by an immediate 502.
type Processor struct {
	extprocv3.UnimplementedExternalProcessorServer
	judge Judge
	o     ProcessorOptions
}

// NewProcessor returns an ExternalProcessor server backed by judge.
func NewProcessor(judge Judge, o ProcessorOptions) *Processor {
	if o.Timeout <= 0 {
		o.Timeout = DefaultProcessTimeout
	}
	return &Processor{judge: judge, o: o}
}

// Register registers p on a gRPC server.
func (p *Processor) Register(g *grpc.Server) { extprocv3.RegisterExternalProcessorServer(g, p) }

// exchange is one stream's state.
type exchange struct {
	req    *binding.Request
	body   []byte
	status int
	resp   []byte
	// encoding is the response's content-encoding.
	encoding string
	judged   bool
	started  bool
	// responding is set by the response's headers.
	responding bool
	// observed is set by a message in observability mode.
	observed bool
}

// Process serves one HTTP request's stream. Each message is answered in
// order with its matching response; the response body (or the response
// headers, when there is no body) is answered only once the outcome frame
// is durable. A stream that breaks or times out before then is recorded as
// unverified and never answered with a pass.
func (p *Processor) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	msgs := make(chan *extprocv3.ProcessingRequest)
	// recvErr is why the stream's reading ended (nil when its context
	// ended first), set before recvDone closes.
	var recvErr error
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr = err
				return
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	timer := time.NewTimer(p.o.Timeout)
	defer timer.Stop()
	var x exchange
	for {
		var m *extprocv3.ProcessingRequest
		select {
		case m = <-msgs:
		case <-recvDone:
			return p.ended(ctx, &x, recvErr)
		case <-timer.C:
			p.abandon(context.WithoutCancel(ctx), &x, ErrStreamTimeout)
			return status.Error(codes.DeadlineExceeded, ErrStreamTimeout.Error())
		case <-ctx.Done():
			<-recvDone // Recv returns once the stream's context is done
			return p.ended(ctx, &x, recvErr)
		}
		resp := p.answer(ctx, &x, m)
		if resp == nil {
			continue // observability mode: nothing to answer
		}
		if err := stream.Send(resp); err != nil {
			// The answer cannot reach Envoy: the exchange ends here, and is
			// recorded unverified unless its outcome already is. A stream
			// whose context ended has its reading end too, and its error
			// says why.
			if ctx.Err() != nil {
				<-recvDone
				if recvErr != nil && !errors.Is(recvErr, io.EOF) {
					err = recvErr
				}
			}
			return p.ended(ctx, &x, err)
		}
	}
}

// ended records x as unverified when the stream ended before its
// response was judged, naming the stream's own error (a message over the
// size limit, say) over its cancelled context, and returns what Process
// returns.
func (p *Processor) ended(ctx context.Context, x *exchange, err error) error {
	why := err
	if why == nil {
		why = ctx.Err()
	}
	p.abandon(context.WithoutCancel(ctx), x, fmt.Errorf("%w: %v", ErrStreamBroken, errOrEOF(why)))
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err == nil && ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return err
}

func errOrEOF(err error) error {
	if err == nil {
		return io.EOF
	}
	return err
}

// answer is the response to one message.
func (p *Processor) answer(ctx context.Context, x *exchange, m *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	if m.GetObservabilityMode() {
		// Envoy ignores answers and releases the response unjudged: such a
		// filter cannot enforce anything, so the stream is only recorded.
		x.observed = true
		p.observe(ctx, x, m)
		return nil
	}
	if err := outOfOrder(x, m); err != nil {
		// Judged unverified: refused in enforce mode, recorded in
		// advisory, where the message is then answered as usual.
		if v := p.finish(ctx, x, err); !v.Release {
			return immediate(&v)
		}
	}
	switch r := m.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		x.req = requestFromHeaders(r.RequestHeaders.GetHeaders())
		x.started = true
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extprocv3.HeadersResponse{}}}
	case *extprocv3.ProcessingRequest_RequestBody:
		x.body = append(x.body, r.RequestBody.GetBody()...)
		if p.o.MaxBodyBytes > 0 && int64(len(x.body)) > p.o.MaxBodyBytes && x.req != nil {
			x.req.BodyErr = ErrBodyTooLarge
		}
		if x.req != nil && x.req.BodyErr == nil {
			x.req.Body = x.body
		}
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{}}}
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		h := r.ResponseHeaders
		x.responding = true
		if x.responseHeaders(h.GetHeaders()) {
			x.judged = true // never judged: it is not a tool's response
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{}}}
		}
		if !h.GetEndOfStream() {
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{}}}
		}
		v := p.finish(ctx, x, nil)
		if !v.Release {
			return immediate(&v)
		}
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{Response: passing(&v)}}}
	case *extprocv3.ProcessingRequest_ResponseBody:
		b := r.ResponseBody
		if x.judged {
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
				ResponseBody: &extprocv3.BodyResponse{}}}
		}
		x.resp = append(x.resp, b.GetBody()...)
		var err error
		switch {
		case !b.GetEndOfStream():
			err = ErrBodyNotBuffered
		case p.o.MaxBodyBytes > 0 && int64(len(x.resp)) > p.o.MaxBodyBytes:
			err = ErrResponseTooLarge
		}
		v := p.finish(ctx, x, err)
		if !v.Release {
			return immediate(&v)
		}
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: passing(&v)}}}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}}
	}
	// A message this processor does not know: it cannot be answered in
	// kind, and the response must not pass unjudged.
	v := p.finish(ctx, x, fmt.Errorf("extauthz: unexpected ext_proc message %T", m.Request))
	return immediate(&v)
}

// outOfOrder returns ErrOutOfOrder for a message Envoy does not send at
// this point of x's stream, else nil.
func outOfOrder(x *exchange, m *extprocv3.ProcessingRequest) error {
	if x.judged {
		return nil // what follows the verdict changes nothing
	}
	switch m.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if x.started {
			return fmt.Errorf("%w: the request's headers again", ErrOutOfOrder)
		}
	case *extprocv3.ProcessingRequest_RequestBody, *extprocv3.ProcessingRequest_RequestTrailers:
		if x.responding {
			return fmt.Errorf("%w: a request message after the response's headers", ErrOutOfOrder)
		}
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if x.responding {
			return fmt.Errorf("%w: the response's headers again", ErrOutOfOrder)
		}
	case *extprocv3.ProcessingRequest_ResponseBody:
		if !x.responding {
			return fmt.Errorf("%w: the response's body before its headers", ErrOutOfOrder)
		}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return fmt.Errorf("%w: the response's trailers before its body was judged", ErrOutOfOrder)
	}
	return nil
}

// observe records what an observability-mode stream shows; nothing is
// answered.
func (p *Processor) observe(ctx context.Context, x *exchange, m *extprocv3.ProcessingRequest) {
	switch r := m.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		x.req, x.started = requestFromHeaders(r.RequestHeaders.GetHeaders()), true
	case *extprocv3.ProcessingRequest_RequestBody:
		x.body = append(x.body, r.RequestBody.GetBody()...)
		if x.req != nil {
			x.req.Body = x.body
		}
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if x.responseHeaders(r.ResponseHeaders.GetHeaders()) {
			x.judged = true
		}
		if r.ResponseHeaders.GetEndOfStream() && !x.judged {
			p.finish(ctx, x, nil)
		}
	case *extprocv3.ProcessingRequest_ResponseBody:
		x.resp = append(x.resp, r.ResponseBody.GetBody()...)
		if r.ResponseBody.GetEndOfStream() && !x.judged {
			p.finish(ctx, x, nil)
		}
	}
}

// finish judges the response once.
func (p *Processor) finish(ctx context.Context, x *exchange, err error) binding.Verdict {
	x.judged = true
	req := x.req
	if req == nil {
		// Response messages with no request headers before them: nothing
		// says which call this is, so nothing may pass.
		req = &binding.Request{Method: "POST", Headers: map[string]string{}}
		if err == nil {
			err = errors.New("extauthz: response messages before the request headers")
		}
	}
	v := p.judge.Outcome(ctx, &binding.Exchange{Request: req, ReportedBy: wal.ReporterEnvoy, Observed: x.observed,
		Response: binding.Response{Status: x.status, Body: x.resp, Err: err, Encoding: x.encoding}})
	if !v.Judged {
		v.Release = true
	}
	return v
}

// abandon records a stream that ended before its response was judged,
// when its request was one the gate may have let through.
func (p *Processor) abandon(ctx context.Context, x *exchange, err error) {
	if x.judged || !x.started || x.req == nil {
		return
	}
	p.finish(ctx, x, err)
}

// responseHeaders takes the response's status (0 when absent or bad) and
// content-encoding from its headers, and reports whether, coming before any
// request message, they are a reply Envoy made itself, before the request
// reached this filter: ext_authz's deny, say, which Envoy sends through the
// filters' response path without their request path (docs/API.md).
// Nothing reached the tool runtime, so there is nothing to judge. A 2xx
// reply counts only with the gate's audit id header (an MCP deny is a
// 200): a 2xx with neither a request nor that header is treated as a
// response nothing says the gate allowed, and is refused.
func (x *exchange) responseHeaders(hm *corev3.HeaderMap) (localReply bool) {
	h := map[string]string{}
	addHeaderMap(h, hm)
	x.status, x.encoding = 0, h["content-encoding"]
	if n, err := strconv.Atoi(h[":status"]); err == nil {
		x.status = n
	}
	if x.started || x.judged {
		return false
	}
	if x.status < 200 || x.status > 299 {
		return x.status != 0
	}
	return h[binding.HeaderAuditID] != ""
}

// requestFromHeaders is the gate's view of the request headers Envoy sends
// on the stream: method and path from the pseudo headers, names lower-case.
func requestFromHeaders(hm *corev3.HeaderMap) *binding.Request {
	r := &binding.Request{Headers: make(map[string]string, len(hm.GetHeaders()))}
	addHeaderMap(r.Headers, hm)
	r.Method, r.Path = r.Headers[":method"], r.Headers[":path"]
	return r
}

// addHeaderMap adds hm to headers, lower-casing names and joining the
// values of a repeated name with commas; a value may come as raw_value.
func addHeaderMap(headers map[string]string, hm *corev3.HeaderMap) {
	for _, hv := range hm.GetHeaders() {
		v := hv.GetValue()
		if v == "" && len(hv.GetRawValue()) > 0 {
			v = string(hv.GetRawValue())
		}
		k := strings.ToLower(hv.GetKey())
		if prev, ok := headers[k]; ok && prev != v {
			v = prev + "," + v
		}
		headers[k] = v
	}
}

// passing is the CommonResponse of a released response: the warning
// header when a strict: false postcondition failed, and never a copy of it
// the tool set.
func passing(v *binding.Verdict) *extprocv3.CommonResponse {
	m := &extprocv3.HeaderMutation{}
	if v.Warning != "" {
		m.SetHeaders = []*corev3.HeaderValueOption{headerOption(binding.HeaderPostconditionWarning, v.Warning)}
	} else {
		m.RemoveHeaders = []string{binding.HeaderPostconditionWarning}
	}
	return &extprocv3.CommonResponse{HeaderMutation: m}
}

// immediate replaces the response by the verdict's 502 and JSON body.
func immediate(v *binding.Verdict) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(v.Status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				headerOption("content-type", "application/json"),
				headerOption(binding.HeaderAuditID, v.AuditID),
			}},
			Body:    v.Body,
			Details: "autonomy_" + strings.ReplaceAll(v.Attrs.Reason, ": ", "_"),
		}}}
}

func headerOption(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}
