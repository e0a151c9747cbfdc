#!/usr/bin/env bash
# Runs every fuzz target in the module for a bounded time (FUZZTIME, default
# 20s each), one after the other: the seed corpora in testdata/fuzz run as
# plain tests with `go test ./...`; this adds fresh random inputs on top. A
# crasher is written to the package's testdata/fuzz/<FuzzName>/ and fails the
# run; commit it as a regression seed once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME="${FUZZTIME:-20s}"

# "<package dir> <FuzzName>" for every func FuzzXxx(f *testing.F) in a test file.
targets=$(grep -rEo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . |
  sed -E 's#^(.*)/[^/]+_test\.go:func (Fuzz[A-Za-z0-9_]+).*#\1 \2#' | sort -u)
if [ -z "$targets" ]; then
  echo "fuzz: no fuzz targets found" >&2
  exit 1
fi

n=0
while read -r dir name; do
  echo "fuzz: $name in $dir for $FUZZTIME"
  go test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$dir"
  n=$((n + 1))
done <<< "$targets"
echo "fuzz: $n targets ran $FUZZTIME each without a finding"
