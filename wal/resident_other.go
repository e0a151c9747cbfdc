//go:build !linux

package wal

// releaseMapped does nothing here: the pages stay mapped until the kernel
// reclaims them.
func releaseMapped(uintptr, int64) error { return nil }

// adviseMapped does nothing here.
func adviseMapped(uintptr, int64, bool) error { return nil }
