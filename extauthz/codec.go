package extauthz

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// vtMarshaler is what go-control-plane's vtprotobuf code gives the
// ext_authz messages (CheckResponse among them): marshalling by generated
// code instead of protobuf reflection. That code is compiled only with the
// vtprotobuf build tag (go build -tags vtprotobuf); without it no message
// has these methods and every answer goes through the protobuf codec. The
// Check handler's answers carry their encoding already (wire.go), so the
// tag matters little for them. It generates no unmarshalling, so requests
// are decoded by the protobuf codec either way.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(dAtA []byte) (int, error)
}

// codec is grpc's protobuf codec with the generated marshalling where a
// message has it. The bytes are the same protobuf encoding
// (TestCodecMarshalsAsProto), so a client sees no difference.
type codec struct {
	proto encoding.CodecV2
}

// CodecOption makes a gRPC server use codec for every service on it:
// messages without generated marshalling (health checks) go through the
// protobuf codec unchanged.
func CodecOption() grpc.ServerOption {
	return grpc.ForceServerCodecV2(codec{proto: encoding.GetCodecV2(proto.Name)})
}

func (c codec) Name() string { return proto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMarshaler)
	if !ok {
		return c.proto.Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVTStrict(buf); err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVTStrict(*buf); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }
