//go:build linux || darwin

package wal

import "syscall"

// freeBytes returns the space an unprivileged writer may still use on the
// file system holding dir.
func freeBytes(dir string) (uint64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return st.Bavail * uint64(st.Bsize), true
}
