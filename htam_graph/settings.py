"""Settings: one object, built in `cli/` from flags > `HTAM_*` / `NEO4J_*` env > config file > defaults.

Nothing here reads the environment at import time.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class PolicySettings(BaseModel):
    """Parameters of the global-direction policy (documented in the README)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    history_k: int = Field(default=4, ge=1, le=32, description="last K directions aggregated")
    decay: float = Field(default=0.7, ge=0.0, description="recency decay: weight ∝ exp(-decay · age)")
    prior_gain: float = Field(
        default=0.05,
        description="mean gain (ln speed-up) a seeded prior transition is shrunk towards; > no_support_score",
    )
    prior_strength: float = Field(default=3.0, ge=0.0, description="pseudo-count of the shrinkage prior")
    compile_penalty: float = Field(
        default=0.1, ge=0.0, description="utility lost per unit compile-failure rate"
    )
    no_support_score: float = Field(default=0.0, description="score of a direction with no precedent")
    temperature: float = Field(default=0.05, gt=0.0, description="softmax temperature over scores")
    explore_bonus: float = Field(default=0.02, ge=0.0, description="UCB-style bonus / sqrt(1 + support)")
    foreign_weight: float = Field(
        default=0.5, ge=0.0, le=1.0, description="weight of evidence measured on another GPU architecture"
    )
    local_explore_c: float = Field(
        default=0.1,
        ge=0.0,
        description="UCB constant of the local-strategy choice: mean gain + c·sqrt(ln N / n)",
    )


class Settings(BaseModel):
    """Everything a command needs to know, passed down explicitly."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    htam_home: Path = Field(default_factory=lambda: Path.home() / ".htam-graph")
    graph_uri: str | None = None  # neo4j:// or bolt:// selects Neo4j; None selects the embedded FalkorDB
    neo4j_username: str = "neo4j"
    neo4j_password: SecretStr = SecretStr("")
    neo4j_database: str | None = None
    graph_name: str = "htam"  # FalkorDB graph key
    policy: PolicySettings = Field(default_factory=PolicySettings)
    seed: int = 0

    @property
    def uses_neo4j(self) -> bool:
        return self.graph_uri is not None
