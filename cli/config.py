"""Builds the one `Settings` object: flags > HTAM_* / NEO4J_* environment > config file > defaults."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from htam_graph.errors import ConfigError
from htam_graph.settings import Settings

_ENV = {
    "htam_home": "HTAM_HOME",
    "graph_uri": "NEO4J_URI",
    "neo4j_username": "NEO4J_USERNAME",
    "neo4j_password": "NEO4J_PASSWORD",
    "neo4j_database": "NEO4J_DATABASE",
    "graph_name": "HTAM_GRAPH_NAME",
    "seed": "HTAM_SEED",
}


def build_settings(
    flags: Mapping[str, Any], config_path: str | None = None, env: Mapping[str, str] | None = None
) -> Settings:
    """Merge the sources; raise ConfigError (one line) on anything invalid."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    path = config_path or env.get("HTAM_CONFIG")
    if path:
        try:
            values.update(tomllib.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"cannot read config file {path}: {e}") from e
    for field, var in _ENV.items():
        if env.get(var):
            values[field] = env[var]
    values.update({k: v for k, v in flags.items() if v is not None})
    if values.get("graph_uri") and not str(values["graph_uri"]).startswith(
        ("neo4j://", "neo4j+s://", "neo4j+ssc://", "bolt://", "bolt+s://", "bolt+ssc://")
    ):
        raise ConfigError(f"--graph must be a neo4j:// or bolt:// URI, got {values['graph_uri']!r}")
    try:
        return Settings(**values)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"invalid setting {loc}: {first['msg']}") from e
