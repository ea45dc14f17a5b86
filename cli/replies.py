"""Replies that come later, from the command line's side: what to tell the user, and the batch courier.

A run that stops awaiting a reply leaves its request in its folder's `pending/` (`htam_graph.llm.pending`).
`awaiting_line` is the one line `run` and `bench` print about such runs. For `batch:*` backends the courier
(`htam_graph.llm.batch`) sends every awaited request under the output folder as one batch job, waits for it
(up to --llm-timeout seconds), and saves each result as the step's reply, so that the runs can resume.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from htam_graph.generators import LLMFlags

__all__ = ["awaiting_line", "courier_for"]


def awaiting_line(summaries: list[dict[str, Any]]) -> str | None:
    """The one line telling what to do when runs await replies (None when none does). Each summary (or bench
    row) of such a run holds `awaiting_reply`: where its reply is expected."""
    waiting = [Path(s["awaiting_reply"]) for s in summaries if s.get("awaiting_reply")]
    if not waiting:
        return None
    if len(waiting) == 1:
        reply = waiting[0]
        request = reply.with_name(reply.name.replace(".reply.md", ".request.md"))
        return f"awaiting a reply: answer {request} in {reply}, then run the same command again"
    return (
        f"{len(waiting)} runs await a reply: answer each pending/step_N.request.md in step_N.reply.md "
        f"beside it (first: {waiting[0]}), then run the same command again"
    )


def courier_for(backend: str, base_url: str | None, flags: LLMFlags) -> Any:
    """The batch courier of a `batch:PROVIDER[:MODEL]` backend, None for the other backends."""
    if not backend.startswith("batch:"):
        return None
    from htam_graph.llm.batch import make_courier
    from htam_graph.llm.pricing import Price

    return make_courier(
        backend,
        env=os.environ,
        base_url=base_url,
        max_tokens=flags.max_tokens,
        temperature=flags.temperature,
        wait_s=flags.timeout_s,
        price=Price.parse(flags.price) if flags.price else None,
    )
