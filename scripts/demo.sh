#!/usr/bin/env bash
# The one-command demo:  bash scripts/demo.sh [--port 8000]
# Installs everything into .venv at the repo root, then seeds a three-account cdkd world into
# an embedded moto server and starts the web app, a worker, the webhook receiver and the
# loopback OpenID provider (see scripts/demo.py, which stops them all on Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -r requirements.txt 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

exec .venv/bin/python scripts/demo.py "$@"
