#!/usr/bin/env bash
# Installs everything into .venv and runs the whole test suite:  bash scripts/test.sh [pytest args]
# Uses PostgreSQL and Redis on 127.0.0.1 when they answer (CI starts them first); otherwise
# says so and falls back to SQLite and an in-memory Redis. CDKD_REQUIRE_SERVICES=1 (set by
# .ci/run) turns the fallback into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -r requirements.txt 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

require=${CDKD_REQUIRE_SERVICES:-0}
fallback() {
  if [ "$require" = "1" ]; then echo "error: $1 (CDKD_REQUIRE_SERVICES=1)" >&2; exit 1; fi
  echo "note: $1; $2"
}

if [ -z "${DATABASE_URL:-}" ]; then
  if .venv/bin/python - <<'PY' 2>/dev/null
import psycopg
psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", connect_timeout=3).close()
PY
  then
    export DATABASE_URL="postgres://postgres@127.0.0.1:5432/cdkd_admin"
    echo "database: PostgreSQL at 127.0.0.1:5432"
  else
    fallback "PostgreSQL is not reachable at 127.0.0.1:5432" "the tests use SQLite instead"
    export DATABASE_URL="sqlite:///$(pwd)/var/test.sqlite3"
    mkdir -p var
  fi
fi

if [ -z "${REDIS_URL:-}" ]; then
  if .venv/bin/python - <<'PY' 2>/dev/null
import redis
redis.Redis.from_url("redis://127.0.0.1:6379/0", socket_connect_timeout=3).ping()
PY
  then
    export REDIS_URL="redis://127.0.0.1:6379/14"
    echo "redis: 127.0.0.1:6379 (database 14, flushed by the tests)"
  else
    fallback "Redis is not reachable at 127.0.0.1:6379" "the tests use fakeredis instead"
    export REDIS_URL="fakeredis://"
  fi
fi

if [ ! -x /usr/bin/chromium ]; then
  fallback "/usr/bin/chromium is missing (apt-get install chromium)" "browser tests are skipped"
fi

export CDKD_SYNC_INTERVAL=0
# DEBUG is off by default, as in production; under pytest the settings supply test-only
# SECRET_KEY and CDKD_ENCRYPTION_KEYS values (never used outside a test run).
exec .venv/bin/python -m pytest "$@"
