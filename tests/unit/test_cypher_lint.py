"""Every shipped .cypher file: a valid header, declared == used parameters, and only the portable subset
(docs/graph-portability.md). Schema files under schema/<dialect>/ are checked for their header only.

Each lint rule has a negative test proving it flags a bad snippet, and the good snippets prove it is not
over-broad.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from htam_graph import queries
from htam_graph.store import schema

# -- the linter --------------------------------------------------------------------------------------------
_STRING_RE = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_CLAUSE_END = (
    r"(?=\bORDER\s+BY\b|\bSKIP\b|\bLIMIT\b|\bWHERE\b|\bRETURN\b|\bWITH\b|\bUNION\b|\bOPTIONAL\b|\bMATCH\b"
    r"|\bUNWIND\b|\bMERGE\b|\bCREATE\b|\bSET\b|\bDELETE\b|\bDETACH\b|\bFOREACH\b|;|\Z)"
)


def _code(text: str) -> str:
    """Statement text without comments and with string literals blanked (so their words never match)."""
    return _STRING_RE.sub("''", queries.strip_comments(text))


def _top_level_commas(text: str) -> int:
    return len(_split_top_level(text)) - 1


def _balanced_args(code: str, start: int) -> str:
    """The text inside the parentheses opening at code[start]."""
    depth = 0
    for i in range(start, len(code)):
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        if depth == 0:
            return code[start + 1 : i]
    return code[start + 1 :]


def _round_with_two_args(code: str) -> bool:
    return any(
        _top_level_commas(_balanced_args(code, m.end() - 1)) > 0
        for m in re.finditer(r"\bround\s*\(", code, re.IGNORECASE)
    )


_AGGREGATE_RE = re.compile(r"^(count|sum|avg|min|max|collect|stdev|stdevp|percentile\w*)\s*\(", re.I)


def _unique_sort_key(expr: str, code: str) -> bool:
    """A single sort key is deterministic when it cannot tie: an application key (`n.key`, or an alias of
    one), or the grouping key of an aggregation (`WITH type(r) AS type, count(r) AS count ... ORDER BY type`)."""
    expr = re.sub(r"\s+(ASC|DESC|ASCENDING|DESCENDING)\s*$", "", expr.strip(), flags=re.I).strip()
    if re.fullmatch(r"\w+\.key", expr):
        return True
    for clause in re.finditer(r"\b(?:WITH|RETURN)\b(.*?)" + _CLAUSE_END, code, re.I | re.DOTALL):
        body = re.sub(r"^\s*DISTINCT\b", "", clause.group(1), flags=re.I)
        items = [i.strip() for i in _split_top_level(body)]
        for item in items:
            m = re.fullmatch(r"(.+?)\s+AS\s+(\w+)", item, re.I | re.DOTALL)
            if m is None or m.group(2) != expr:
                continue
            if re.fullmatch(r"\w+\.key", m.group(1).strip()):
                return True
            others = [i for i in items if i is not item]
            if others and all(_AGGREGATE_RE.match(i) for i in others):
                return True
    return False


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def _order_by_without_tie_break(code: str) -> bool:
    for m in re.finditer(r"\bORDER\s+BY\b(.*?)" + _CLAUSE_END, code, re.IGNORECASE | re.DOTALL):
        keys = _split_top_level(m.group(1))
        if len(keys) == 1 and not _unique_sort_key(keys[0], code):
            return True
    return False


def _merge_node_not_by_key(code: str) -> bool:
    """A node MERGE must name one label and exactly the `key` property (FalkorDB/Neo4j lock on it)."""
    for m in re.finditer(
        r"\bMERGE\s*\(\s*\w*\s*((?::\s*\w+)*)\s*(\{[^}]*\})?\s*\)(?!\s*-)", code, re.IGNORECASE
    ):
        labels, props = m.group(1), m.group(2) or ""
        keys = [p.split(":")[0].strip() for p in props.strip("{}").split(",") if p.strip()]
        if labels.count(":") != 1 or keys != ["key"]:
            return True
    return False


def _merge_rel_between_unbound(code: str) -> bool:
    """A relationship MERGE must join variables bound earlier: `MERGE (a)-[t:T]->(b)`, no labels/props inline."""
    for m in re.finditer(r"\bMERGE\s*\(([^)]*)\)\s*<?-", code, re.IGNORECASE):
        rest = code[m.start() :].split("\n", 1)[0]
        nodes = re.findall(r"\(([^)]*)\)", rest)
        if any(not re.fullmatch(r"\s*\w+\s*", n) for n in nodes[:2]):
            return True
    return False


RULES: dict[str, Callable[[str], bool]] = {
    "elementId()": lambda c: bool(re.search(r"\belementId\s*\(", c, re.I)),
    "id()": lambda c: bool(re.search(r"(?<![.\w])id\s*\(", c, re.I)),
    "datetime()": lambda c: bool(re.search(r"\b(local)?datetime\s*\(", c, re.I)),
    "date()": lambda c: bool(re.search(r"(?<![.\w])date\s*\(", c, re.I)),
    "duration()": lambda c: bool(re.search(r"\bduration\s*\(", c, re.I)),
    "round(x, n)": _round_with_two_args,
    "regex =~": lambda c: "=~" in c,
    "EXISTS {}": lambda c: bool(re.search(r"\bEXISTS\s*\{", c, re.I)),
    "COUNT {}": lambda c: bool(re.search(r"\bCOUNT\s*\{", c, re.I)),
    "COLLECT {}": lambda c: bool(re.search(r"\bCOLLECT\s*\{", c, re.I)),
    "CALL": lambda c: bool(re.search(r"\bCALL\b", c, re.I)),
    "IN TRANSACTIONS": lambda c: bool(re.search(r"\bIN\s+TRANSACTIONS\b", c, re.I)),
    "label expression :A|B": lambda c: bool(re.search(r":\s*`?\w+`?\s*\|", c)),
    "SHOW": lambda c: bool(re.search(r"\bSHOW\s", c, re.I)),
    "apoc.*": lambda c: bool(re.search(r"\bapoc\.", c, re.I)),
    "schema statement": lambda c: bool(re.search(r"\b(CREATE|DROP)\s+(CONSTRAINT|INDEX)\b", c, re.I)),
    "toString()": lambda c: bool(re.search(r"\btoString\s*\(", c, re.I)),
    "toFloat()": lambda c: bool(re.search(r"\btoFloat\s*\(", c, re.I)),
    "CREATE (n $map)": lambda c: bool(re.search(r"\bCREATE\s*\(\s*\w*\s*(:\s*\w+\s*)*\$", c, re.I)),
    "ORDER BY without tie-break": _order_by_without_tie_break,
    "node MERGE not on key alone": _merge_node_not_by_key,
    "relationship MERGE on unbound nodes": _merge_rel_between_unbound,
}


def lint(text: str) -> list[str]:
    """Names of the portability rules the statement breaks."""
    code = _code(text)
    return [name for name, broken in RULES.items() if broken(code)]


# -- the shipped files -------------------------------------------------------------------------------------
PORTABLE = queries.names()
SCHEMA = [name for dialect in ("falkordb", "neo4j") for name in queries.names(f"schema/{dialect}")]


def test_there_are_shipped_queries_to_check() -> None:
    assert "schema_version_get" in PORTABLE and "schema_version_set" in PORTABLE
    assert SCHEMA, "no schema files found"


@pytest.mark.parametrize("name", PORTABLE)
def test_portable_query_header_params_and_subset(name: str) -> None:
    query = queries.load(name)  # parses the header; raises on a missing/misnamed one
    assert query.used_params() == query.params, (
        f"{name}: declared {sorted(query.params)} but uses {sorted(query.used_params())}"
    )
    assert lint(query.text) == [], f"{name} breaks the portable subset"
    assert query.text.splitlines()[3].startswith("//"), f"{name}: say what it does after the header"


@pytest.mark.parametrize("name", SCHEMA)
def test_schema_file_headers(name: str) -> None:
    query = queries.load(name)
    assert query.params == frozenset() and query.returns == ()
    assert schema.split_statements(query.text), f"{name} holds no statement"


def test_every_label_merged_by_key_has_a_unique_key_schema() -> None:
    merged = {
        label
        for name in PORTABLE
        for label in re.findall(
            r"\bMERGE\s*\(\s*\w*\s*:\s*(\w+)\s*\{\s*key\s*:", _code(queries.load(name).text)
        )
    }
    assert merged - set(schema.KEYED_LABELS) == set(), "add these labels to KEYED_LABELS and the schema files"


@pytest.mark.parametrize("dialect", ["falkordb", "neo4j"])
def test_schema_covers_every_keyed_label_and_dialects_agree(dialect: str) -> None:
    text = "\n".join(s for m in schema.migrations(dialect) for s in m.statements)
    labels = set(re.findall(r"FOR\s*\(\s*\w+\s*:\s*(\w+)\s*\)", text))
    assert labels == set(schema.KEYED_LABELS)
    assert schema.target_version(dialect) == schema.target_version("falkordb")


# -- the linter's own tests --------------------------------------------------------------------------------
BAD = {
    "elementId()": "MATCH (n) RETURN elementId(n) AS i",
    "id()": "MATCH (n) WHERE ID(n) = $i RETURN n.key AS k",
    "datetime()": "RETURN datetime() AS t",
    "date()": "RETURN date('2024-01-01') AS d",
    "duration()": "RETURN duration({days: 1}) AS d",
    "round(x, n)": "RETURN round(sqrt(2.0), 3) AS r",
    "regex =~": "MATCH (n) WHERE n.key =~ 'a.*' RETURN n.key AS k",
    "EXISTS {}": "MATCH (n) WHERE EXISTS { (n)-->() } RETURN n.key AS k",
    "COUNT {}": "MATCH (n) RETURN COUNT { (n)-->() } AS c",
    "COLLECT {}": "MATCH (n) RETURN COLLECT { MATCH (n)-->(m) RETURN m } AS c",
    "CALL": "CALL { MATCH (n) RETURN n } RETURN n.key AS k",
    "IN TRANSACTIONS": "MATCH (n) CALL { WITH n DETACH DELETE n } IN TRANSACTIONS",
    "label expression :A|B": "MATCH (n:Global|Local) RETURN n.key AS k",
    "SHOW": "SHOW INDEXES",
    "apoc.*": "RETURN apoc.text.join(['a'], ',') AS s",
    "schema statement": "CREATE INDEX FOR (n:Global) ON (n.key)",
    "toString()": "RETURN toString(1.5) AS s",
    "toFloat()": "RETURN toFloat('1.5') AS f",
    "CREATE (n $map)": "CREATE (n:Global $props)",
    "ORDER BY without tie-break": "MATCH (n) RETURN n.key AS k, n.s AS s ORDER BY s DESC LIMIT $n",
    "node MERGE not on key alone": "MERGE (n:Global {key: $k, name: $name})",
    "relationship MERGE on unbound nodes": "MERGE (a:Global {key: $a})-[t:TRANSITION]->(b:Global {key: $b})",
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_flags_its_bad_snippet(rule: str) -> None:
    assert rule in lint(BAD[rule])


GOOD = [
    "MATCH (n:Global {key: $k}) SET n.updated_ms = $now",  # 'update' is not date(), 'n.key' is not id()
    "MATCH (n:Global) RETURN n.key AS k, n.score AS s ORDER BY s DESC, k ASC SKIP $s LIMIT $n",
    "MATCH (n:Global) WITH n ORDER BY n.score DESC, n.key ASC LIMIT 3 RETURN collect(n.key) AS ks",
    "RETURN round(2.5) AS r, toInteger(sum(1)) AS s, 'CALL apoc. =~ SHOW x' AS text",
    "UNWIND $rows AS row MATCH (a:Global {key: row.src}), (b:Global {key: row.dst}) "
    "MERGE (a)-[t:TRANSITION]->(b) ON CREATE SET t.count = 0",
    "MERGE (n:Global {key: $key}) ON CREATE SET n.created_ms = $now",
    "MATCH (a:Global) RETURN [(a)-[:REFINES]->(l) | l.key] AS locals, [x IN $xs | x * 2] AS doubled",
    "MATCH (n:Task) RETURN n.valid_id AS v, coalesce(n.x, 0) AS x // a comment: ORDER BY s",
    "MATCH (g:Global) RETURN g.key AS key ORDER BY key ASC",  # a unique key alone cannot tie
    "MATCH (g:Global) WITH g ORDER BY g.key ASC LIMIT $n RETURN g.key AS k, g.s AS s ORDER BY s DESC, k ASC",
    "MATCH ()-[r]->() WITH type(r) AS type, count(r) AS count RETURN type, count ORDER BY type ASC",
]

TIES = [
    "MATCH (g:Global) RETURN g.name AS name ORDER BY name ASC",  # names can repeat
    "MATCH (g:Global) WITH g.score AS s, g.key AS k, count(*) AS c RETURN s ORDER BY s DESC",
    "MATCH (g:Global) WITH g ORDER BY g.score DESC LIMIT 3 RETURN g.key AS k ORDER BY k ASC",
]


@pytest.mark.parametrize("text", TIES)
def test_order_by_rule_flags_sort_keys_that_can_tie(text: str) -> None:
    assert "ORDER BY without tie-break" in lint(text)


@pytest.mark.parametrize("text", GOOD)
def test_portable_snippets_pass(text: str) -> None:
    assert lint(text) == []
