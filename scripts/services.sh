#!/usr/bin/env bash
# Bring up what the integration tests need, if it is not already running:
# PostgreSQL on 127.0.0.1:5432 and Redis on 127.0.0.1:6379.
set -euo pipefail

wait_for() {  # name, command
  for _ in $(seq 1 60); do
    if eval "$2" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "services: $1 did not come up" >&2
  return 1
}

if ! pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then
  echo "services: starting PostgreSQL"
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start
  else
    echo "services: PostgreSQL is not running and pg_ctlcluster is not installed" >&2
    exit 1
  fi
  wait_for PostgreSQL "pg_isready -h 127.0.0.1 -p 5432"
fi

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "services: starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  wait_for Redis "redis-cli -h 127.0.0.1 -p 6379 ping"
fi
echo "services: PostgreSQL and Redis are up"
