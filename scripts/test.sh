#!/usr/bin/env bash
# The README's test command: install into ./.venv and run the test suite, on every core (pytest-xdist) but for the
# Neo4j tests, which run beside it in one process of their own. HTAM_TEST_WORKERS=0 runs the first part serially.
# The slow tier (tests/slow.txt and the tests marked `slow` in place) is left out unless HTAM_TEST_SLOW=1.
# Exit code 5 from pytest (no tests collected) is a failure here: a suite that runs nothing proves nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
echo "test.sh: installed in ${SECONDS} s" >&2
# Headless Chromium draws `memory view` pages in tests/integration/test_memview_html.py. Install Debian's package
# only when no Chromium is present and we are root with apt-get; otherwise carry on (that test then skips,
# or fails under CI=true, saying why).
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium; the headless browser test will not run" >&2
  else
    echo "warning: chromium is missing and cannot be installed here (needs root and apt-get)" >&2
  fi
fi
# --- Neo4j test server (scripts/neo4j-test-server) ------------------------------------------------------------
# Unless NEO4J_URI already names a test database, start the repo's Neo4j (built with Maven on first use) and
# stop it on exit, so every backend-parametrised test runs on FalkorDB and on Neo4j. Under CI=true a server
# that does not start fails the run; elsewhere the Neo4j tests then skip, saying why.
stop_neo4j=false
neo4j_pid=""
on_exit() {
  if [ -n "$neo4j_pid" ]; then kill "$neo4j_pid" 2>/dev/null || true; fi  # the Neo4j pytest, if still running
  if [ "$stop_neo4j" = true ]; then scripts/neo4j-test-server stop; fi
}
trap on_exit EXIT
if [ -z "${NEO4J_URI:-}" ]; then
  neo4j_was_running=false
  scripts/neo4j-test-server status 2>/dev/null && neo4j_was_running=true
  if neo4j_env=$(scripts/neo4j-test-server start); then
    [ "$neo4j_was_running" = true ] || stop_neo4j=true  # only the one started here
    eval "$neo4j_env"
  elif [ "${CI:-}" = true ]; then
    echo "error: the Neo4j test server did not start (CI=true): failing rather than skipping its tests" >&2
    exit 1
  else
    echo "warning: the Neo4j test server did not start; the Neo4j tests will be skipped" >&2
  fi
fi
# --- end of the Neo4j block -------------------------------------------------------------------------------------
export TRITON_INTERPRET=1
# Two pytest runs at once: everything but the Neo4j tests on every core, and beside it the Neo4j tests in one
# process (they share one database, which each of them empties; pytest-xdist's group scheduling does not keep
# them together under pytest 9; they mostly wait on the server). The Neo4j run's output is shown when both
# have ended. The marker expressions repeat pyproject's default deselection. worksteal: an idle worker takes
# queued tests from a busy one, so one worker does not end the run alone on a queue of long tests.
DEFAULT_MARKS="not gpu and not live and not slow"
[ "${HTAM_TEST_SLOW:-0}" = 1 ] && DEFAULT_MARKS="not gpu and not live"
neo4j_log=$(mktemp)
set +e
.venv/bin/python -m pytest -q -m "$DEFAULT_MARKS and neo4j" tests "$@" >"$neo4j_log" 2>&1 &
neo4j_pid=$!
.venv/bin/python -m pytest -q -n "${HTAM_TEST_WORKERS:-auto}" --dist worksteal --durations=25 -m "$DEFAULT_MARKS and not neo4j" tests "$@"
rc_main=$?
echo "test.sh: main pytest ended at ${SECONDS} s" >&2
wait "$neo4j_pid"
rc_neo4j=$?
neo4j_pid=""
echo "test.sh: the Neo4j pytest ended by ${SECONDS} s" >&2
set -e
echo "--- the Neo4j tests (pytest -m '$DEFAULT_MARKS and neo4j', run beside the others; exit $rc_neo4j) ---"
cat "$neo4j_log"
rm -f "$neo4j_log"
if [ "$rc_main" -eq 5 ] && [ "$rc_neo4j" -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose (exit 5)" >&2
  exit 1
fi
# Exit 5 of one run alone is a selection ("$@") that holds no test of that part.
[ "$rc_main" -eq 5 ] && rc_main=0
[ "$rc_neo4j" -eq 5 ] && rc_neo4j=0
if [ "$rc_main" -ne 0 ]; then exit "$rc_main"; fi
exit "$rc_neo4j"
