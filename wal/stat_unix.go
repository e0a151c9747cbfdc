//go:build unix

package wal

import "syscall"

type fileID struct{ dev, ino uint64 }

// statPathID names the file at path by device and inode through stat(2).
// It calls stat(2) itself: os.Stat's FileInfo would be an allocation on
// every commit.
func statPathID(path string) (fileID, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Stat(path, &st)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fileID{}, err
		}
		return fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil
	}
}
