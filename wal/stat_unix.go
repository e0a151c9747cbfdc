//go:build unix

package wal

import (
	"os"
	"syscall"
)

type fileID struct{ dev, ino uint64 }

func statID(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, nil
	}
	return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
}
