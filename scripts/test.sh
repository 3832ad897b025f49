#!/usr/bin/env bash
# The test command: what CI runs (.ci/run calls exactly this) and what a
# developer runs before pushing. It installs the servers the tests start for
# themselves (redis-server, PostgreSQL) when they are missing, then runs the
# checks and the tests of every module of the workspace (go.work) with the
# race detector.
#
#   ./scripts/test.sh
#
# Whole run: about 12 minutes on 2 cores, the redis module's tests about
# 7 of them (each step's line shows where the time went). Long runs (lab
# suites, fuzzing for longer, full benchmarks) are separate commands in
# the README.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's line carries the seconds since the start, so a run's log
# shows where its time went.
step() { printf '\n== %s (at %ds)\n' "$*" "$SECONDS"; }
# On the way out, a redis module go test still running in the background
# (see the tests step) is stopped.
redis_tests=
trap '[ -z "$redis_tests" ] || kill "$redis_tests" 2>/dev/null; printf "\n== done (at %ds)\n" "$SECONDS"' EXIT

step "install test servers when missing"
./scripts/install-test-deps.sh

step "every module is in go.work"
# A pattern such as ./... stops at a nested module's go.mod, even in
# workspace mode, so each step below names every workspace module; a module
# missing from go.work would be skipped by all of them without a word.
root=$(pwd)
modules=()
while IFS= read -r dir; do
	rel=${dir#"$root"}
	modules+=(".${rel:-}")
done < <(go list -m -f '{{.Dir}}')
for mod in $(git ls-files 'go.mod' '*/go.mod' 2>/dev/null || find . -name go.mod); do
	dir=./$(dirname "$mod")
	dir=${dir%/.}
	case " ${modules[*]} " in
	*" $dir "*) ;;
	*) echo "$mod is not in go.work: add it with go work use $dir"; exit 1 ;;
	esac
done
all=()
for mod in "${modules[@]}"; do all+=("$mod/..."); done
echo "${modules[*]}"

step "each module's go.mod and go.sum are tidy (each module builds on its own)"
# Outside the workspace, as a user of one module builds it: a requirement the
# workspace supplies from a sibling but the go.mod lacks shows up here.
for mod in "${modules[@]}"; do
	(cd "$mod" && GOWORK=off go mod tidy -diff) || { echo "run go mod tidy in $mod"; exit 1; }
done

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "go vet"
go vet "${all[@]}"

step "staticcheck"
# Run at a pinned version straight from the module proxy, so that no
# module's requirements carry the linter; it loads the packages through the
# workspace like go vet.
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 "${all[@]}"

step "tests (race detector on)"
# Every module but bench, whose benchmarks run below, and lab, which runs on
# its own afterwards: its smoke tests start a 60-server Cluster (fleet-loss)
# and network namespaces (grey-node), and beside the redis module's tests of
# timing under faults they starved those into failing on a clean 2-core
# machine.
# The redis module's tests take about 7 minutes, most of it waiting on
# faults one after another; they start first, in a go test of their own,
# and the other modules' packages run one at a time beside them, so that
# they share the machine with one other package at a time, as in one go
# test of all of them two at a time. In such a go test they start only once
# the packages before them in its order have run, 1.5 minutes in.
others=()
for mod in "${modules[@]}"; do
	case "$mod" in ./bench | ./lab | ./redis) ;; *) others+=("$mod/...") ;; esac
done
go test -race -count=1 -timeout 12m ./redis/... &
redis_tests=$!
others_rc=0
go test -race -count=1 -p 1 -timeout 12m "${others[@]}" || others_rc=$?
redis_rc=0
wait "$redis_tests" || redis_rc=$?
redis_tests=
if [ "$others_rc" != 0 ] || [ "$redis_rc" != 0 ]; then
	echo "tests failed: redis module rc $redis_rc, the others rc $others_rc"
	exit 1
fi

step "lab module tests (race detector on)"
go test -race -count=1 -timeout 12m ./lab/...

step "heap measures (race detector off)"
# TestIndexBytes measures the live heap of stores of up to 18 MiB: under the
# race detector it takes minutes and measures nothing more, so the run above
# skips it and it runs here, in a second.
go test -count=1 -run '^TestIndexBytes$' ./internal/local

step "fuzzing (short): envelopes, stream announcements, the store's eviction"
# A count, not a duration: with a duration Go's fuzzing coordinator can fail
# the run with a bare "context deadline exceeded" when a worker on a busy
# machine is mid-call as the time runs out (no input found, nothing to
# reproduce). 300,000 executions take about 5 s here when idle.
go test -run '^$' -fuzz '^FuzzDecodeEntry$' -fuzztime 300000x ./tier
# The invalidation stream's messages come off a pub/sub channel anyone with
# access to the server can publish on.
go test -run '^$' -fuzz '^FuzzDecodeAnnouncement$' -fuzztime 300000x ./redis
# The in-process store's eviction bookkeeping against a model of what was
# written: about 4 s here when idle.
go test -run '^$' -fuzz '^FuzzPolicy$' -fuzztime 30000x ./internal/local

step "bench module: tests, and every benchmark once"
# -short: a benchmark whose figure is invalid on a machine this busy (the
# shared-hit ratio, when Redis reads pass their budget) logs it rather than
# fail; scripts/figures.sh is what checks the figures.
go test -count=1 -timeout 6m -short -run . -bench . -benchtime 1x ./bench/...
