package etcdtest

import "testing"

// StartT starts a cluster for a test and closes it when the test ends.
func StartT(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	c, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
