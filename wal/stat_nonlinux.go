//go:build unix && !linux

package wal

// statID names the file at path by device and inode.
func statID(path string) (fileID, error) { return statPathID(path) }
