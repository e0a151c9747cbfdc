// Command testsummary reads `go test -json` on stdin, prints what plain
// `go test` would (a line per package, the output of every failed test),
// and then every skipped test with its reason, so that a run that skipped
// tests for want of a program (nginx, Caddy, Chromium) says so at the end.
// It exits 1 when any package or test failed.
//
//	go test -json ./... | go run ./internal/testsummary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of test2json's output.
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type skip struct{ pkg, test, reason string }

func main() {
	failed, skips, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	printSkips(os.Stdout, skips)
	if failed {
		os.Exit(1)
	}
}

// summarize copies the run's verdicts to w and returns whether anything
// failed and what was skipped.
func summarize(r io.Reader, w io.Writer) (failed bool, skips []skip, err error) {
	output := map[string][]string{} // package + "\x00" + test → output lines
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if json.Unmarshal(line, &e) != nil || e.Action == "" {
			// Build errors and other text go test prints as it is.
			fmt.Fprintln(w, string(line))
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "output":
			output[key] = append(output[key], e.Output)
		case "fail":
			failed = true
			if e.Test != "" {
				fmt.Fprint(w, strings.Join(output[key], ""))
			} else {
				fmt.Fprint(w, packageText(output[key]))
				fmt.Fprintf(w, "FAIL\t%s\t%.3fs\n", e.Package, e.Elapsed)
			}
		case "skip":
			if e.Test != "" {
				skips = append(skips, skip{e.Package, e.Test, reason(output[key])})
			} else if strings.Contains(strings.Join(output[key], ""), "no test files") {
				fmt.Fprintf(w, "?   \t%s\t[no test files]\n", e.Package)
			}
		case "pass":
			if e.Test == "" {
				fmt.Fprintf(w, "ok  \t%s\t%.3fs\n", e.Package, e.Elapsed)
			}
		}
		if e.Action == "pass" || e.Action == "fail" || e.Action == "skip" {
			if e.Test != "" {
				delete(output, key)
			}
		}
	}
	return failed, skips, sc.Err()
}

// packageText is a failed package's own output without test2json's
// per-test framing, which the failed tests have already printed.
func packageText(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		if strings.HasPrefix(l, "FAIL") || strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "PASS") {
			continue
		}
		b.WriteString(l)
	}
	return b.String()
}

// reason is what a skipped test logged, without the === and --- lines.
func reason(lines []string) string {
	var parts []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " / ")
}

func printSkips(w io.Writer, skips []skip) {
	sort.Slice(skips, func(i, j int) bool {
		if skips[i].pkg != skips[j].pkg {
			return skips[i].pkg < skips[j].pkg
		}
		return skips[i].test < skips[j].test
	})
	fmt.Fprintf(w, "\n== skipped tests: %d\n", len(skips))
	for _, s := range skips {
		fmt.Fprintf(w, "SKIP %s %s: %s\n", s.pkg, s.test, s.reason)
	}
}
