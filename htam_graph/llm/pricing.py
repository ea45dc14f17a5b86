"""USD prices per million tokens for the models whose price we know, and the cost of one call.

Prices are copied from the providers' public pricing pages (Anthropic: platform.claude.com "Pricing",
5-minute cache writes = 1.25x input, cache hits = 0.1x input; DeepSeek: api-docs.deepseek.com
"Models & Pricing", USD, cache-hit / cache-miss input). They change: check them before trusting a budget,
or pass an explicit `Price` (CLI `--price`).

An unknown model is never priced by guess: its cost is 0.0 with `Usage.cost_known=False` and a logged
warning, and a dollar budget cannot be enforced for it (the registry refuses that combination).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from htam_graph.model import Usage

log = logging.getLogger(__name__)

_PER_TOKEN = 1e-6  # prices are quoted per million tokens


@dataclass(frozen=True)
class Price:
    """USD per million tokens of each kind."""

    input_per_mtok: float
    output_per_mtok: float
    cache_write_per_mtok: float
    cache_read_per_mtok: float

    @classmethod
    def anthropic(cls, input_per_mtok: float, output_per_mtok: float) -> Price:
        """Anthropic's multipliers: 5-minute cache write 1.25x input, cache read 0.1x input."""
        return cls(
            input_per_mtok, output_per_mtok, round(input_per_mtok * 1.25, 6), round(input_per_mtok * 0.1, 6)
        )

    @classmethod
    def parse(cls, text: str) -> Price:
        """Parse `IN,OUT[,CACHE_WRITE,CACHE_READ]` (USD per million tokens), e.g. from a `--price` flag.

        With two numbers, cache writes cost the input price and cache reads cost the input price too
        (the conservative choice: never under-count).
        """
        from htam_graph.errors import ConfigError

        try:
            values = [float(part) for part in text.split(",")]
        except ValueError as e:
            raise ConfigError(
                f"bad price {text!r}: expected IN,OUT[,CACHE_WRITE,CACHE_READ] in USD/Mtok"
            ) from e
        if len(values) not in (2, 4) or any(v < 0 for v in values):
            raise ConfigError(f"bad price {text!r}: expected 2 or 4 non-negative numbers (USD per Mtok)")
        if len(values) == 2:
            return cls(values[0], values[1], values[0], values[0])
        return cls(*values)


ANTHROPIC_PRICES: dict[str, Price] = {
    "claude-opus-4-6": Price.anthropic(5.0, 25.0),
    "claude-opus-4-5": Price.anthropic(5.0, 25.0),
    "claude-opus-4-1": Price.anthropic(15.0, 75.0),
    "claude-opus-4-0": Price.anthropic(15.0, 75.0),
    "claude-opus-4": Price.anthropic(15.0, 75.0),
    "claude-sonnet-4-6": Price.anthropic(3.0, 15.0),
    "claude-sonnet-4-5": Price.anthropic(3.0, 15.0),
    "claude-sonnet-4-0": Price.anthropic(3.0, 15.0),
    "claude-sonnet-4": Price.anthropic(3.0, 15.0),
    "claude-haiku-4-5": Price.anthropic(1.0, 5.0),
    "claude-3-5-haiku": Price.anthropic(0.8, 4.0),
}

# DeepSeek bills cache-hit input at a reduced rate and has no separate cache-write charge.
OPENAI_COMPAT_PRICES: dict[str, Price] = {
    "deepseek-reasoner": Price(0.55, 2.19, 0.55, 0.14),
    "deepseek-chat": Price(0.27, 1.10, 0.27, 0.07),
}

_DATE_SUFFIX = re.compile(r"-\d{8}$")  # claude-sonnet-4-5-20250929 -> claude-sonnet-4-5
_warned: set[str] = set()


def lookup_price(model: str) -> Price | None:
    """The known price of `model` (dated snapshots map to their alias), or None."""
    name = model.strip().lower()
    name = name.split("/")[-1]  # openrouter-style "deepseek/deepseek-reasoner"
    for table in (ANTHROPIC_PRICES, OPENAI_COMPAT_PRICES):
        if name in table:
            return table[name]
        undated = _DATE_SUFFIX.sub("", name)
        if undated in table:
            return table[undated]
    return None


def make_usage(
    price: Price | None,
    model: str,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> Usage:
    """Usage of one call with its dollar cost. `input_tokens` excludes cached tokens (billed apart).

    With no price the cost is 0.0 and `cost_known` is False (a warning is logged once per model).
    """
    counts = {
        "input_tokens": max(0, input_tokens),
        "output_tokens": max(0, output_tokens),
        "cache_read_tokens": max(0, cache_read_tokens),
        "cache_write_tokens": max(0, cache_write_tokens),
    }
    if price is None:
        if model not in _warned:
            _warned.add(model)
            log.warning("no price known for model %r: its cost is recorded as 0 (cost_known=False)", model)
        return Usage(**counts, cost_usd=0.0, cost_known=False)
    cost = _PER_TOKEN * (
        counts["input_tokens"] * price.input_per_mtok
        + counts["output_tokens"] * price.output_per_mtok
        + counts["cache_write_tokens"] * price.cache_write_per_mtok
        + counts["cache_read_tokens"] * price.cache_read_per_mtok
    )
    return Usage(**counts, cost_usd=cost, cost_known=True)
