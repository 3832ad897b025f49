#!/usr/bin/env bash
# Installs the servers the tests start for themselves, from Debian's packages,
# when they are missing: redis-server (the Redis tier, Cluster, Sentinel and
# lab tests; a sentinel is redis-server --sentinel, so Debian's
# redis-sentinel package adds nothing they need)
# and PostgreSQL (the catalog store's PostgreSQL suite, run through
# pg_ctlcluster), and the tools of the lab's network namespace test (iproute2,
# util-linux). Nothing is started here; each test starts its own server on
# a free loopback port and removes it afterwards.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v pg_ctlcluster >/dev/null 2>&1 || need+=(postgresql-common)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
# The lab's grey-node test shapes a loopback of its own: ip and tc make and
# shape it, unshare makes the network namespace.
PATH=$PATH:/usr/sbin:/sbin
command -v tc >/dev/null 2>&1 && command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v unshare >/dev/null 2>&1 || need+=(util-linux)

if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	sudo=sudo
else
	sudo=
fi
echo "installing from Debian's packages: ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The Debian package starts a redis-server on the well-known port 6379; the
# tests never use it, so stop it rather than leave it running.
if command -v systemctl >/dev/null 2>&1; then $sudo systemctl stop redis-server 2>/dev/null || true; fi
$sudo service redis-server stop >/dev/null 2>&1 || true
pkill -f 'redis-server 127.0.0.1:6379' 2>/dev/null || true
