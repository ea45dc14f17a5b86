"""Seeding the memory: the seed file's globals, locals (with REFINES) and prior transitions, MERGEd so that
re-seeding updates descriptions and never touches evidence."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from pydantic import BaseModel, ConfigDict

from htam_graph.memory.common import now_ms
from htam_graph.model import SeedMemory
from htam_graph.ports import GraphStore

__all__ = ["SeedCounts", "ensure_seeded", "seed_digest", "seed_memory"]

log = logging.getLogger(__name__)


class SeedCounts(BaseModel):
    """What `seed_memory` merged (entries of the seed file; re-seeding merges the same entries again)."""

    model_config = ConfigDict(frozen=True)
    version: int
    globals: int
    locals: int
    transitions: int


def seed_memory(store: GraphStore, seed: SeedMemory) -> SeedCounts:
    """MERGE the seed's globals, locals (with REFINES) and prior transitions. Idempotent: descriptive
    properties are updated from the file, evidence (counts, sums, per-arch edges) is never touched."""
    globals_rows = [{"key": g.key, "props": g.model_dump(mode="json", exclude={"key"})} for g in seed.globals]
    locals_rows = [
        {"key": loc.key, "global_key": loc.global_key, "props": loc.model_dump(mode="json", exclude={"key"})}
        for loc in seed.locals
    ]
    pairs: dict[tuple[str, str], dict[str, Any]] = {}
    for t in seed.transitions:  # one row per (src, dst): a batch must not MERGE one edge twice
        pairs[(t.src, t.dst)] = t.model_dump(mode="json")
    store.run("seed_globals", {"rows": globals_rows})
    store.run("seed_locals", {"rows": locals_rows})
    store.run("seed_transitions", {"rows": list(pairs.values())})
    store.run("seed_mark", {"version": seed.version, "digest": seed_digest(seed), "seeded_ms": now_ms()})
    log.info(
        "seeded memory v%d: %d globals, %d locals, %d priors",
        seed.version,
        len(globals_rows),
        len(locals_rows),
        len(pairs),
    )
    return SeedCounts(
        version=seed.version, globals=len(globals_rows), locals=len(locals_rows), transitions=len(pairs)
    )


def seed_digest(seed: SeedMemory) -> str:
    """sha256 of the seed's content: any edit of the seed file (a new Local, a changed op tag) changes it."""
    return hashlib.sha256(seed.model_dump_json().encode()).hexdigest()


def ensure_seeded(store: GraphStore, seed: SeedMemory | None = None) -> SeedCounts | None:
    """Seed when the graph holds no Global node, its recorded seed version is older than `seed`'s (default:
    the packaged seed file) or its content differs from the seed last applied (an edit without a version bump
    must still reach an existing memory). Seeding is idempotent and keeps the evidence. Returns the counts
    when it seeded, None when the memory was current."""
    if seed is None:
        from htam_graph.seed import load_seed

        seed = load_seed()
    state = store.run("seed_state")[0]
    stored = state["version"]
    if int(state["globals"]) > 0 and stored is not None:
        if int(stored) > seed.version:
            return None  # a memory seeded by a newer release: its descriptions are newer than this file's
        if int(stored) == seed.version and state.get("digest") == seed_digest(seed):
            return None
    return seed_memory(store, seed)
