"""A stand-in "model" for `--backend command:`: answers every request with one fixed candidate file.

    htam-graph run TASK --backend command:"python3 scripts/canned_model.py CANDIDATE.py REQUEST_DIR" ...

It reads the request from stdin, keeps a copy as REQUEST_DIR/request_N.txt (so the prompt a real model would have
seen can be read afterwards) and replies with `STRATEGY: none` and the candidate's source in a python block. It
exercises the command backend end to end with a known kernel; it is not a model and learns nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    candidate, request_dir = Path(sys.argv[1]), Path(sys.argv[2])
    request = sys.stdin.read()
    request_dir.mkdir(parents=True, exist_ok=True)
    n = len(list(request_dir.glob("request_*.txt"))) + 1
    (request_dir / f"request_{n}.txt").write_text(request, encoding="utf-8")
    source = candidate.read_text(encoding="utf-8")
    sys.stdout.write(f"STRATEGY: none\n\n```python\n{source}```\n")


if __name__ == "__main__":
    main()
