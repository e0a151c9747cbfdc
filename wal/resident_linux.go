//go:build linux

package wal

import "golang.org/x/sys/unix"

// releaseMapped unmaps the resident pages of the size bytes mapped at
// addr (madvise MADV_DONTNEED). On a shared file mapping that drops only
// the process's page-table entries: the pages stay in the page cache and a
// later read maps them again.
func releaseMapped(addr uintptr, size int64) error {
	return madvise(addr, size, unix.MADV_DONTNEED)
}

// adviseMapped tells the kernel how the size bytes mapped at addr are
// about to be read: sequential reads (MADV_SEQUENTIAL, large readahead on
// a fault) or, as bbolt advises when it maps the file, random ones.
func adviseMapped(addr uintptr, size int64, sequential bool) error {
	if sequential {
		return madvise(addr, size, unix.MADV_SEQUENTIAL)
	}
	return madvise(addr, size, unix.MADV_RANDOM)
}

func madvise(addr uintptr, size int64, advice int) error {
	if addr == 0 || size <= 0 {
		return nil
	}
	// The raw call takes the address as bbolt reports it, a uintptr,
	// instead of turning it back into a pointer.
	_, _, errno := unix.Syscall(unix.SYS_MADVISE, addr, uintptr(size), uintptr(advice))
	if errno != 0 {
		return errno
	}
	return nil
}
