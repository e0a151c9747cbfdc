// Package bundletest writes policy bundles for tests and loads them the way
// the service loads --bundle DIR: real files in a temporary directory, read
// by OPA's loader.
package bundletest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/contractrefine/autonomy/internal/bundle"
)

// Dir writes files (name → contents, a name may hold slashes) into a fresh
// t.TempDir() and returns it.
func Dir(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Load writes files with Dir and loads them with opts, failing the test if
// the bundle does not load.
func Load(t testing.TB, files map[string]string, opts *bundle.Options) *bundle.Bundle {
	t.Helper()
	b, err := bundle.Load(context.Background(), Dir(t, files), opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
