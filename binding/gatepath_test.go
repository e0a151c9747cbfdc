package binding

import "testing"

// TestGatesPath: every form of the gate path some router routes to it is
// gated, and nothing else is.
func TestGatesPath(t *testing.T) {
	g := New(Options{Path: "/v1/tool"})
	for p, want := range map[string]bool{
		"/v1/tool":               true,
		"/v1/tool?x=1":           true,
		"/v1/to%6Fl":             true,
		"/v1//tool/":             true,
		"/v1/x/../tool":          true,
		"/V1/TOOL":               true,
		"/v1/tool;a=b":           true,
		"/v1;x/tool":             true,
		"/v1/tool%00.json":       true,
		"http://runtime/v1/tool": true,
		"//evil/v1/tool":         true,
		"http:/v1/tool":          true, // net/http routes it to /v1/tool
		"HTTP:/v1/tool":          true,
		"x-y.z+1:/v1/tool":       true,
		"http:v1/tool":           true,
		"https:///v1/tool":       true,
		`http://x\v1/tool`:       true,
		"http:/v1/tool%zz":       true,
		"http:/v1/x":             false,
		"1http:/v1/tool":         false, // no scheme: the path /1http:/v1/tool
		"/v1/tool%zz":            true,  // does not decode: checked
		"/v1/tool%23x":           true,
		"/v1/tool%3Fx=1":         true,
		"/v1/tool.json":          true,
		"/v1/tool;a=b.json":      true,
		`/v1\tool`:               true, // backslash read as a slash
		`/v1/tool\`:              true,
		"/v1%5Ctool":             true,
		"/v1/%2574ool":           true, // decoded twice
		"/v1/%252574ool":         true, // three times
		"/v1/tool%20":            true, // trailing white space and dots trimmed
		"/v1/tool%09":            true,
		"/v1/tool..":             true,
		"/v1/tool.%20":           true,
		"/v1/%2574ool;%25zz":     true, // the second decode, lenient, keeps %zz
		"/v1/tool/x/..":          true,
		"/v1/tool/x/%2E%2E":      true,
		`/v1/tool\x\..`:          true,
		"/v1/tool/..":            false, // that is /v1
		"/search/100%25":         false,
		"/v1/%25252574ool":       false, // four times: past maxDecodes
		"/v1/tools%20":           false,
		"/v1/to%20ol":            false,
		"/v1/tools.json":         false,
		"/v1/.tool":              false,
		"/v1/toolbox":            false,
		"/v1/tool/x.json":        false,
		"/v1/other;tool":         false,
		"/v1":                    false,
		"http://runtime/v1/x":    false,
	} {
		if got := g.gatesPath(p); got != want {
			t.Errorf("gatesPath(%q) = %v, want %v", p, got, want)
		}
	}
}
