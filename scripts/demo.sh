#!/usr/bin/env bash
# The one-command demo:  bash scripts/demo.sh [--port 8000]
# Installs everything into .venv at the repo root, then seeds a three-account cdkd world into
# an embedded moto server and starts the web app and a worker (see scripts/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -r requirements.txt 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

# The webhook target: a small receiver listing what it is sent (demo/receiver.py), stopped on exit.
mkdir -p var
RECEIVER_PORT=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export CDKD_DEMO_WEBHOOK_SECRET="${CDKD_DEMO_WEBHOOK_SECRET:-$(.venv/bin/python -c 'import secrets; print("whsec_" + secrets.token_urlsafe(24))')}"
export CDKD_DEMO_RECEIVER_URL="http://127.0.0.1:${RECEIVER_PORT}"
export EMAIL_BACKEND="${EMAIL_BACKEND:-django.core.mail.backends.console.EmailBackend}"  # emails in var/demo-worker.log
.venv/bin/python demo/receiver.py --port "$RECEIVER_PORT" > var/demo-receiver.log 2>&1 &
RECEIVER_PID=$!
trap 'kill "$RECEIVER_PID" 2>/dev/null || true' EXIT
echo "  webhooks   receiver at ${CDKD_DEMO_RECEIVER_URL}/ lists the payloads it gets (log: var/demo-receiver.log)"

.venv/bin/python scripts/demo.py "$@"
