#!/usr/bin/env bash
# Times `go run ./catalogd` from the command to its first 200 from
# /v1/products/1 on a fresh data directory (migrations and the seeding of
# 10,000 products included), on a free loopback port. Set GOCACHE to an
# empty directory to time a cold build as well:
#
#   ./scripts/catalogd-startup.sh
#   GOCACHE=$(mktemp -d) ./scripts/catalogd-startup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
start=$(date +%s.%N)
go build -o "$dir/catalogd" ./catalogd
built=$(date +%s.%N)
"$dir/catalogd" -addr 127.0.0.1:0 -data-dir "$dir/data" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 1 2400); do # at most 120 s
	url=$(grep -o 'url=http://127.0.0.1:[0-9]*' "$dir/log" | head -1 | cut -d= -f2 || true)
	if [ -n "$url" ] && curl -sf "$url/v1/products/1" >/dev/null; then
		end=$(date +%s.%N)
		echo "build $(echo "$built - $start" | bc) s; first 200 from /v1/products/1 $(echo "$end - $built" | bc) s after start; total $(echo "$end - $start" | bc) s"
		grep -o 'startup=[0-9.a-zµ]*' "$dir/log" | head -1
		exit 0
	fi
	sleep 0.05
done
echo "catalogd did not serve within 120 s" >&2
cat "$dir/log" >&2
exit 1
