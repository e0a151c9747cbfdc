//go:build !linux

package main

import "os"

// dropCache leaves the page cache as it is where fadvise is not at hand.
func dropCache(*os.File) error { return nil }
