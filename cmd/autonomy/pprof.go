//go:build pprof

package main

import (
	"log"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on http.DefaultServeMux
	"os"
)

// A binary built with `-tags pprof` serves net/http/pprof on the address in
// AUTONOMY_PPROF_ADDR (say 127.0.0.1:6060), for profiling the real process
// under the load command. Release builds carry none of it.
func init() {
	addr := os.Getenv("AUTONOMY_PPROF_ADDR")
	if addr == "" {
		return
	}
	go func() { log.Println(http.ListenAndServe(addr, nil)) }()
}
