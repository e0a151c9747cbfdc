package server

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/contractrefine/autonomy/internal/config"
)

// TestGRPCStalledStreamsAreBounded scripts the attack on the gRPC
// listener: one connection opens many Check streams, each declaring a
// 2 MiB message and sending part of it, never finishing. Before the
// limits, every stream stayed open holding its partial message for as
// long as the client liked (10 such connections of 250 streams held
// 2.2 GB). Now streams past grpc.max_bytes_in_flight are refused with
// RESOURCE_EXHAUSTED, streams past grpc.max_concurrent_streams are refused
// by HTTP/2, and the admitted ones are cancelled at grpc.receive_timeout:
// every stream ends although the client never finishes one.
func TestGRPCStalledStreamsAreBounded(t *testing.T) {
	e := obsStart(t, func(c *config.Config) {
		c.GRPC.MaxConcurrentStreams = 8
		c.GRPC.MaxBytesInFlight = 2 * (c.HTTP.MaxBodyBytes + 1<<20) // two messages
		c.GRPC.ReceiveTimeout = 500 * time.Millisecond
	}, Options{ReadinessInterval: -1})
	conn, fr, headers := rawCheckConn(t, e.addrs.GRPC)
	// The gRPC message prefix declares 2 MiB; 8 KiB of it is sent.
	data := make([]byte, 5+8<<10)
	binary.BigEndian.PutUint32(data[1:5], 2<<20)
	const streams = 12
	for i := range streams {
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: headers, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, false, data); err != nil {
			t.Fatal(err)
		}
	}
	ended := map[uint32]string{}
	dec := hpack.NewDecoder(4096, nil)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // bounds a server that never ends them
	for len(ended) < streams {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("%d of %d streams ended before the read failed: %v (%v)", len(ended), streams, err, ended)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.RSTStreamFrame:
			if _, done := ended[f.StreamID]; !done { // a refusal's status comes first
				ended[f.StreamID] = "rst " + f.ErrCode.String()
			}
		case *http2.HeadersFrame:
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, hf := range fields {
				if _, done := ended[f.StreamID]; !done && hf.Name == "grpc-status" {
					ended[f.StreamID] = "grpc-status " + hf.Value
				}
			}
		}
	}
	counts := map[string]int{}
	for _, how := range ended {
		counts[how]++
	}
	if counts["grpc-status 8"] == 0 { // RESOURCE_EXHAUSTED: past the bytes in flight
		t.Errorf("no stream was refused for grpc.max_bytes_in_flight: %v", counts)
	}
	if counts["grpc-status 8"]+counts["rst REFUSED_STREAM"] < streams-2 {
		t.Errorf("more than two streams were admitted with room for two messages: %v", counts)
	}
	t.Logf("how the %d streams ended: %v", streams, counts)
}

// TestGRPCWindowsAreFixed: the listener advertises a stream window with
// room for its largest message and sends no PING of grpc's window
// estimate with a request message, so a Check costs one read and one
// write of the connection, not three and two (docs/PERFORMANCE.md).
func TestGRPCWindowsAreFixed(t *testing.T) {
	e := obsStart(t, nil, Options{ReadinessInterval: -1})
	conn, fr, headers := rawCheckConn(t, e.addrs.GRPC)
	if err := conn.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: headers, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, true, make([]byte, 5)); err != nil { // an empty CheckRequest
		t.Fatal(err)
	}
	var window uint32
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				window = v
			}
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				t.Fatalf("the server sent a PING with the request message")
			}
		}
		if f.Header().StreamID == 1 && f.Header().Flags.Has(http2.FlagHeadersEndStream) {
			break
		}
	}
	if want := uint32(config.Default().HTTP.MaxBodyBytes + 1<<20); window != want {
		t.Fatalf("stream window %d, want %d", window, want)
	}
}

// rawCheckConn opens an HTTP/2 connection to the gRPC listener at addr by
// hand, preface and settings sent, closed when the test ends, and returns
// it with its framer and the header block of a Check request, for tests
// that script frames no gRPC client would send.
func rawCheckConn(t *testing.T, addr string) (net.Conn, *http2.Framer, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "autonomy"},
		{":path", "/envoy.service.auth.v3.Authorization/Check"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return conn, fr, hb.Bytes()
}
