#!/usr/bin/env bash
# The README's test command: install into ./.venv (CPU torch pinned) and run the test suite.
# Exit code 5 from pytest (no tests collected) is a failure here: a suite that runs nothing proves nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
export TRITON_INTERPRET=1
set +e
.venv/bin/python -m pytest -q tests "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose (exit 5)" >&2
  exit 1
fi
exit "$rc"
