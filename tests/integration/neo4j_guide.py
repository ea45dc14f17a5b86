"""The queries of docs/neo4j/browser_guide.md, for the tests that run them on Neo4j (APOC-loaded graphs, Neo4j
Browser itself). Loaded by path (`load_sibling("neo4j_guide")`, see sibling_module.py).
"""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "neo4j" / "browser_guide.md"


def guide() -> tuple[str, dict[str, str], list[str]]:
    """(the `:params` block as written, its parameters, every other cypher block), in the guide's order."""
    blocks = [b.strip() for b in re.findall(r"```cypher\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)]
    params_block = next(b for b in blocks if b.startswith(":params"))
    params = dict(re.findall(r"(\w+):\s*'([^']*)'", params_block))
    return params_block, params, [b for b in blocks if b != params_block]


def is_picture(query: str) -> bool:
    """A graph-view query: its RETURN names whole nodes and relationships (the tabular ones alias columns)."""
    return " AS " not in query.rsplit("RETURN", 1)[1]


def used_params(query: str, params: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in params.items() if re.search(rf"\${k}\b", query)}
