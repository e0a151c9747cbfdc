package wal

// MinFreeBytes is the free space below which Probe reports the log unable
// to write.
const MinFreeBytes = 1 << 20
