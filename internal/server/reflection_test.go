package server

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/contractrefine/autonomy/internal/config"
)

// TestGRPCReflection: grpc.reflection: true lists the Check's service to a
// reflection client (what grpcurl asks); by default reflection is not served.
func TestGRPCReflection(t *testing.T) {
	for name, on := range map[string]bool{"on": true, "off by default": false} {
		t.Run(name, func(t *testing.T) {
			e := obsStart(t, func(c *config.Config) { c.GRPC.Reflection = on }, Options{ReadinessInterval: -1})
			conn, err := grpc.NewClient(e.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			services, err := listServices(ctx, conn)
			if !on {
				if status.Code(err) != codes.Unimplemented {
					t.Fatalf("reflection off: services %v, err %v; want Unimplemented", services, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"envoy.service.auth.v3.Authorization", "grpc.health.v1.Health"} {
				if !slices.Contains(services, want) {
					t.Errorf("reflection lists %v, want %s among them", services, want)
				}
			}
		})
	}
}

func listServices(ctx context.Context, conn *grpc.ClientConn) ([]string, error) {
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	// A Send that meets a stream the server already ended returns io.EOF;
	// Recv then returns the status the server ended it with.
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}
