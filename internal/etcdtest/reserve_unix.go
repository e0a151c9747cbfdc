//go:build unix

package etcdtest

import (
	"io"
	"os"
	"syscall"
)

// reservePort binds a TCP socket to 127.0.0.1:port without listening on
// it. Until it is closed the kernel gives the port to no other listener
// that asks for any port and to no outgoing connection, and a connection
// to it is refused, as to a stopped server.
func reservePort(port int) (io.Closer, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	syscall.CloseOnExec(fd)
	// The stopped server's connections may still be in TIME_WAIT.
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("setsockopt", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	return os.NewFile(uintptr(fd), "reserved-port"), nil
}
