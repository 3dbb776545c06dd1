#!/usr/bin/env bash
# Make sure the shared PostgreSQL (127.0.0.1:5432, database "test") and Redis (127.0.0.1:6379) are
# up. Tests that kill or restart a server start their own throwaway copies instead.
set -euo pipefail
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  if command -v pg_ctlcluster >/dev/null 2>&1 && ls /etc/postgresql >/dev/null 2>&1; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start
  fi
  for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 0.2; done
fi
pg_isready -h 127.0.0.1 -p 5432
psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" postgres | grep -q 1 \
  || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test" postgres
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 50); do redis-cli ping >/dev/null 2>&1 && break; sleep 0.2; done
fi
redis-cli -h 127.0.0.1 -p 6379 ping
