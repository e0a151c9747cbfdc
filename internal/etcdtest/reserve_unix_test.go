//go:build unix

package etcdtest

import (
	"net"
	"strings"
	"testing"
)

// TestStoppedMemberHoldsItsPorts: a stopped member's client port refuses
// connections, as a stopped server's does, and the member gets it back.
func TestStoppedMemberHoldsItsPorts(t *testing.T) {
	c := StartT(t, Options{})
	m := c.Members[0]
	m.Stop()
	if len(m.reserved) != 2 {
		t.Fatalf("%d ports held while stopped, want the client and the peer port", len(m.reserved))
	}
	addr := strings.TrimPrefix(m.Spec.ClientURL, "http://")
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Fatal("a connection to a stopped member's client port was accepted")
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	if len(m.reserved) != 0 {
		t.Fatalf("%d ports still held after Start", len(m.reserved))
	}
	roundTrip(t, c, "back")
}
