#!/usr/bin/env bash
# Fuzz the HTTP API with schemathesis against its own OpenAPI document, every check on
# (docs/operations.md, "Fuzzing"). Serves the zero-latency echo pool on loopback, runs
# schemathesis from its own venv (it is not a project dependency), then checks the service is
# still alive. Usage: bash experiments/fuzz_api.sh [MAX_EXAMPLES=300] [SEED=1]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-300}; SEED=${2:-1}; ST=${ST_VENV:-/tmp/schemathesis-venv}
test -x "$ST/bin/schemathesis" || { python3 -m venv "$ST" && "$ST/bin/pip" install -q schemathesis; }
RAY_AUTH_MODE=disabled .venv/bin/inframind serve -c deployments/echo_pool.yaml > runs/fuzz-serve.log 2>&1 &
SERVE=$!
trap 'kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do curl -sf -m 2 http://127.0.0.1:8011/healthz >/dev/null && break; sleep 3; done
"$ST/bin/schemathesis" --config-file experiments/schemathesis.toml run \
  http://127.0.0.1:8011/openapi.json --checks all --max-examples "$N" --workers 2 --seed "$SEED" \
  | tee runs/fuzz-api.txt || true
curl -sf -m 5 http://127.0.0.1:8011/healthz && echo " <- service alive after the run"
