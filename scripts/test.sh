#!/usr/bin/env bash
# The test command: what CI runs (.ci/run calls exactly this) and what a
# developer runs before pushing. It installs the servers the tests start for
# themselves (redis-server, PostgreSQL) when they are missing, then runs the
# checks and the tests of both modules with the race detector.
#
#   ./scripts/test.sh
#
# Whole run: about 5 to 10 minutes on 2 cores. Long runs (lab suites, fuzzing
# for longer, full benchmarks) are separate commands in the README.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "install test servers when missing"
./scripts/install-test-deps.sh

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet ./...
(cd bench && go vet ./...)

step "staticcheck"
# Run at a pinned version straight from the module proxy, so that neither the
# library's nor the bench module's requirements carry the linter.
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

step "tests (race detector on)"
go test -race -count=1 -timeout 12m ./...

step "envelope decoder fuzzing (short)"
go test -run '^$' -fuzz '^FuzzDecodeEntry$' -fuzztime 10s .

step "bench module: tests, and every benchmark once"
(cd bench && go test -count=1 -timeout 6m -run . -bench . -benchtime 1x ./...)
