//go:build !unix

package etcdtest

import (
	"errors"
	"io"
)

func reservePort(int) (io.Closer, error) {
	return nil, errors.New("etcdtest: ports cannot be reserved on this system")
}
