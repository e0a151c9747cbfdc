package main

import (
	"strings"
	"testing"
)

// A run as go test -json prints it: a passing package, one with a skipped
// test, one with a failing test, and one without tests.
const run = `{"Action":"start","Package":"example/a"}
{"Action":"run","Package":"example/a","Test":"TestOK"}
{"Action":"output","Package":"example/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"example/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"example/a","Test":"TestOK","Elapsed":0}
{"Action":"pass","Package":"example/a","Elapsed":0.5}
{"Action":"run","Package":"example/b","Test":"TestNginx"}
{"Action":"output","Package":"example/b","Test":"TestNginx","Output":"=== RUN   TestNginx\n"}
{"Action":"output","Package":"example/b","Test":"TestNginx","Output":"    nginx_test.go:40: nginx is not installed\n"}
{"Action":"output","Package":"example/b","Test":"TestNginx","Output":"--- SKIP: TestNginx (0.00s)\n"}
{"Action":"skip","Package":"example/b","Test":"TestNginx","Elapsed":0}
{"Action":"pass","Package":"example/b","Elapsed":0.1}
{"Action":"run","Package":"example/c","Test":"TestBroken"}
{"Action":"output","Package":"example/c","Test":"TestBroken","Output":"=== RUN   TestBroken\n"}
{"Action":"output","Package":"example/c","Test":"TestBroken","Output":"    c_test.go:9: want 1, got 2\n"}
{"Action":"output","Package":"example/c","Test":"TestBroken","Output":"--- FAIL: TestBroken (0.00s)\n"}
{"Action":"fail","Package":"example/c","Test":"TestBroken","Elapsed":0}
{"Action":"output","Package":"example/c","Output":"FAIL\n"}
{"Action":"fail","Package":"example/c","Elapsed":0.2}
{"Action":"output","Package":"example/d","Output":"?   \texample/d\t[no test files]\n"}
{"Action":"skip","Package":"example/d","Elapsed":0}
`

func TestSummarize(t *testing.T) {
	var out strings.Builder
	failed, skips, err := summarize(strings.NewReader(run), &out)
	if err != nil {
		t.Fatal(err)
	}
	if !failed {
		t.Error("a failed test was not reported as a failure")
	}
	printSkips(&out, skips)
	want := []string{
		"ok  \texample/a\t0.500s\n",
		"ok  \texample/b\t0.100s\n",
		"    c_test.go:9: want 1, got 2\n--- FAIL: TestBroken",
		"FAIL\texample/c\t0.200s\n",
		"?   \texample/d\t[no test files]\n",
		"== skipped tests: 1\nSKIP example/b TestNginx: nginx_test.go:40: nginx is not installed\n",
	}
	got := out.String()
	at := 0
	for _, w := range want {
		i := strings.Index(got[at:], w)
		if i < 0 {
			t.Fatalf("output lacks %q after offset %d:\n%s", w, at, got)
		}
		at += i + len(w)
	}
}
