#!/usr/bin/env bash
# Make sure the shared PostgreSQL (127.0.0.1:5432, database "test", user postgres without a
# password) and Redis (127.0.0.1:6379) are up. Tests that kill or restart a server start their own
# throwaway copies instead. Safe to run again and again: it changes nothing once all is well.
#
# On a fresh Debian/Ubuntu box where scripts/install-deps.sh just installed `postgresql`, the
# cluster may not be running (containers without systemd) and its pg_hba.conf asks for a password
# on 127.0.0.1 (scram-sha-256), while the tests and the demo connect as postgres@127.0.0.1 with
# none. This script is for throwaway dev/CI machines: there it starts the cluster and puts loopback
# "trust" lines at the top of that cluster's pg_hba.conf (once; a backup is kept next to it).
# Do not run it against a PostgreSQL that other people use.
#
# It also creates the tests' database "test" if missing, except with --demo (`npm run demo` needs
# only the server: it creates and drops its own database). Servers it starts keep running.
set -euo pipefail
demo=0
for arg in "$@"; do
  case "$arg" in
    --demo) demo=1 ;;
    *) echo "start-local-services: unknown argument $arg (only --demo)" >&2; exit 2 ;;
  esac
done

PG_PORT="${CRONWARDEN_LOCAL_PG_PORT:-5432}"   # only to try this script on a scratch cluster
HBA_MARKER='# cronwarden dev/CI: trust loopback (added by scripts/start-local-services.sh)'
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
say() { echo "start-local-services: $*"; }
die() { echo "start-local-services: $*" >&2; exit 1; }

# "<version> <name>" of the Debian cluster (postgresql-common) configured for $PG_PORT, if any.
debian_cluster() {
  command -v pg_lsclusters >/dev/null 2>&1 || return 0
  { pg_lsclusters --no-header 2>/dev/null || true; } | awk -v port="$PG_PORT" '$3 == port { print $1, $2; exit }'
}

# `select 1` as postgres over TCP, never prompting for a password (-w); prints psql's error.
pg_probe() {
  psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -w -d postgres -tAc 'SELECT 1' 2>&1 >/dev/null
}

# --- PostgreSQL: running? -----------------------------------------------------------------
if ! pg_isready -q -h 127.0.0.1 -p "$PG_PORT"; then
  read -r pg_version pg_name <<<"$(debian_cluster)" || true
  if [ -n "${pg_version:-}" ] && command -v pg_ctlcluster >/dev/null 2>&1; then
    say "starting PostgreSQL cluster $pg_version/$pg_name"
    # --skip-systemctl-redirect: works with or without systemd (containers have none).
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$pg_version" "$pg_name" start
  fi
  for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 -p "$PG_PORT" && break; sleep 0.2; done
fi
pg_isready -q -h 127.0.0.1 -p "$PG_PORT" \
  || die "no PostgreSQL answers on 127.0.0.1:$PG_PORT (and no Debian cluster for that port to start); run scripts/install-deps.sh, or start one"

# --- PostgreSQL: can postgres connect over 127.0.0.1 without a password? --------------------
if ! err="$(pg_probe)"; then
  if ! grep -qiE 'password|authentication failed|no pg_hba.conf entry' <<<"$err"; then
    die "cannot connect as postgres to 127.0.0.1:$PG_PORT: $err"
  fi
  read -r pg_version pg_name <<<"$(debian_cluster)" || true
  hba="/etc/postgresql/${pg_version:-none}/${pg_name:-none}/pg_hba.conf"
  if [ -z "${pg_version:-}" ] || ! $SUDO test -f "$hba"; then
    die "PostgreSQL on 127.0.0.1:$PG_PORT refuses user postgres without a password ($err), and it is not a Debian cluster this script may reconfigure; allow trust for 127.0.0.1 in its pg_hba.conf, or point CRONWARDEN_TEST_POSTGRES_URL / CRONWARDEN_DEMO_ADMIN_URL at a database you can use"
  fi
  if $SUDO grep -qF "$HBA_MARKER" "$hba"; then
    die "PostgreSQL on 127.0.0.1:$PG_PORT still refuses user postgres ($err) although $hba has the trust lines; check that file"
  fi
  # pg_hba.conf is read top-down and the first matching line wins, so the lines go first.
  # cp onto the existing file keeps its owner and mode (postgres, 0640).
  tmp="$(mktemp)"
  trap 'rm -f "$tmp"' EXIT
  {
    echo "$HBA_MARKER"
    echo "host    all    all    127.0.0.1/32    trust"
    echo "host    all    all    ::1/128         trust"
    echo
    $SUDO cat "$hba"
  } >"$tmp"
  $SUDO test -e "$hba.cronwarden-backup" || $SUDO cp -p "$hba" "$hba.cronwarden-backup"
  $SUDO cp "$tmp" "$hba"
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$pg_version" "$pg_name" reload
  for _ in $(seq 1 25); do pg_probe >/dev/null && break; sleep 0.2; done
  err="$(pg_probe)" || die "added loopback trust lines to $hba and reloaded, but user postgres still cannot connect: $err"
  say "PostgreSQL asked for a password on 127.0.0.1: added loopback trust lines at the top of $hba (throwaway dev/CI box; backup $hba.cronwarden-backup) and reloaded"
fi
echo "127.0.0.1:$PG_PORT - accepting connections (user postgres)"
if [ "$demo" -eq 0 ]; then
  psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -w -tAc "SELECT 1 FROM pg_database WHERE datname='test'" postgres | grep -q 1 \
    || psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -w -c "CREATE DATABASE test" postgres
fi

# --- Redis ------------------------------------------------------------------------------------
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  dir=/var/lib/redis
  mkdir -p "$dir" /var/log/redis 2>/dev/null && [ -w "$dir" ] && [ -w /var/log/redis ] || dir="${TMPDIR:-/tmp}/cronwarden-redis"
  mkdir -p "$dir"
  log=/var/log/redis/ci.log
  [ "$dir" = /var/lib/redis ] || log="$dir/redis.log"
  say "starting redis-server on 127.0.0.1:6379 (no persistence; dir $dir)"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no --dir "$dir" --logfile "$log"
  for _ in $(seq 1 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.2; done
fi
redis-cli -h 127.0.0.1 -p 6379 ping
