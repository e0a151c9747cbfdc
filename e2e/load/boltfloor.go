package main

// The store's own floor: the least durable bbolt write
// (benchutil.LeastWriter), one Update with one small put in a fresh file,
// on the file system holding the service's data directory.
const (
	targetStore = "bbolt"
	scBoltWrite = "least durable write"
)
