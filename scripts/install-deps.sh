#!/usr/bin/env bash
# Install, from Debian's packages, the servers cronwarden runs against, when they are missing.
#
#   scripts/install-deps.sh                what `npm test` needs (.ci/run): etcd, Redis and Sentinel,
#                                          PostgreSQL, Chromium (console tests), libfaketime (drill),
#                                          promtool (from `prometheus`: the alert rules' tests)
#   scripts/install-deps.sh --demo         what `npm run demo` needs: PostgreSQL and Redis only,
#                                          without apt's "recommended" extras
#   scripts/install-deps.sh [--demo] --list  print the missing packages on one line (empty if none);
#                                          installs nothing
#
# Quiet: it prints what it installs and how long that took; apt's own output goes to a log file,
# whose path (and last lines) it prints if apt fails. It uses sudo when not run as root.
set -euo pipefail
demo=0 list=0
for arg in "$@"; do
  case "$arg" in
    --demo) demo=1 ;;
    --list) list=1 ;;
    *) echo "install-deps: unknown argument $arg (use --demo and/or --list)" >&2; exit 2 ;;
  esac
done

need=()
have_pg_server() { ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; }
# The `postgresql` package brings the server, psql and pg_isready; `redis-server` brings redis-cli.
have_pg_server || need+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ "$demo" -eq 0 ]; then
  command -v psql >/dev/null 2>&1 || have_pg_server || need+=(postgresql-client)
  command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
  command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
  command -v redis-sentinel >/dev/null 2>&1 || need+=(redis-sentinel)   # the drill's redis-sentinel-failover fault
  command -v chromium >/dev/null 2>&1 || need+=(chromium)               # the status-page browser test
  ls /usr/lib/*/faketime/libfaketimeMT.so.1 >/dev/null 2>&1 || need+=(libfaketime)   # the drill's clock-skew fault
  command -v promtool >/dev/null 2>&1 || need+=(prometheus)             # promtool: the alert rules' checks and unit tests
fi

if [ "$list" -eq 1 ]; then
  echo "${need[*]}"
  exit 0
fi
[ ${#need[@]} -gt 0 ] || exit 0

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || {
    echo "install-deps: installing ${need[*]} needs root, and sudo is missing: run this as root, or install them yourself" >&2
    exit 1
  }
  SUDO=(sudo)
  sudo -v   # a password prompt, if any, comes now rather than in the middle of the quiet part
fi
extra=()
[ "$demo" -eq 0 ] || extra=(--no-install-recommends)
log="$(mktemp "${TMPDIR:-/tmp}/cronwarden-apt-XXXXXX.log")"
echo "install-deps: installing ${need[*]} with apt-get (output in $log)…"
SECONDS=0
# sudo resets the environment, hence `env` for DEBIAN_FRONTEND.
if "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >"$log" 2>&1 \
  && "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${extra[@]}" "${need[@]}" >>"$log" 2>&1; then
  echo "install-deps: installed ${need[*]} in ${SECONDS} s"
  rm -f "$log"
else
  code=$?
  echo "install-deps: apt-get failed (exit $code) after ${SECONDS} s; its full output is in $log; last lines:" >&2
  tail -n 15 "$log" | sed 's/^/  /' >&2
  exit 1
fi
