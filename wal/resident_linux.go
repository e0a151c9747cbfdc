//go:build linux

package wal

import "golang.org/x/sys/unix"

// releaseMapped unmaps the resident pages of the size bytes mapped at
// addr (madvise MADV_DONTNEED). On a shared file mapping that drops only
// the process's page-table entries: the pages stay in the page cache and a
// later read maps them again.
func releaseMapped(addr uintptr, size int64) error {
	if addr == 0 || size <= 0 {
		return nil
	}
	// The raw call takes the address as bbolt reports it, a uintptr,
	// instead of turning it back into a pointer.
	_, _, errno := unix.Syscall(unix.SYS_MADVISE, addr, uintptr(size), unix.MADV_DONTNEED)
	if errno != 0 {
		return errno
	}
	return nil
}
