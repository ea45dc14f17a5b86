"""One step's choice: the global direction (precedent aggregation in the graph, then the softmax policy) and
the local strategy under it (upper-confidence rule), or, for the `flat` ablation, the strategy of the most
similar past attempts.

Only directions with a strategy that fits the task are drawn; the strategies offered are those the run has
demoted least (`run_lessons.py`). With a deterministic generator (the rules) a strategy whose candidate
repeats one already evaluated in this run, or raised on the same inputs, is set aside. A generator that
replays a recorded run (`ports.RecordedChoices`) decides instead: the step takes the recorded direction and
strategy."""

from __future__ import annotations

import hashlib

from htam_graph import memory, policy
from htam_graph.errors import HtamError
from htam_graph.loop.context import Choice, RunContext, RunState
from htam_graph.loop.generate import ask, request_for
from htam_graph.model import DirectionScore, GenerationReply, GenerationRequest, LocalWithEvidence
from htam_graph.ports import RecordedChoices
from htam_graph.run_lessons import inputs_digest
from htam_graph.runtypes import PolicyName

__all__ = ["MAX_ALTERNATIVES", "allowed_directions", "digest", "next_candidate"]

MAX_ALTERNATIVES = 4  # other strategies under the chosen direction offered to an LLM


def digest(source: str) -> str:
    """sha256 of a candidate's source: what tells a repeated candidate."""
    return hashlib.sha256(source.encode()).hexdigest()


def next_candidate(
    ctx: RunContext, state: RunState, step: int
) -> tuple[Choice, GenerationRequest, GenerationReply] | None:
    """Choose and generate the step's candidate. With a deterministic generator (the rules: `executable` is
    set) a strategy whose candidate is byte-identical to one already evaluated in this run is set aside for
    this step and the choice is made again among the rest: re-timing the same kernel teaches nothing. None
    when every applicable strategy repeats itself. An LLM's replies are evaluated as they come. A strategy
    whose candidate raised on the same inputs earlier in the run is not offered again (run_lessons.py)."""
    usable, allowed_now = state.executable, state.allowed
    banned = state.lessons.banned_locals(inputs_digest(state.result.best_source))
    if usable is not None and banned & usable:
        usable = usable - banned
        allowed_now = allowed_directions(ctx, state, usable)
        if not allowed_now:
            return None
    while True:
        choice = _choose(ctx, state, allowed_now, usable, _recorded(ctx, state, step, allowed_now))
        request = request_for(ctx, state, step, choice)
        reply = ask(ctx, state, choice, request)
        repeated = reply.source is not None and digest(reply.source) in state.evaluated
        if usable is None or choice.local is None or not repeated:
            return choice, request, reply
        usable = usable - {choice.local.strategy.key}
        allowed_now = allowed_directions(ctx, state, usable)
        if not allowed_now:
            return None


def allowed_directions(ctx: RunContext, state: RunState, executable: set[str] | None) -> list[str]:
    """Directions with at least one local strategy that fits the task, the language and the generator."""
    return [key for key in sorted(state.directions) if _locals(ctx, state, key, executable)]


def _recorded(
    ctx: RunContext, state: RunState, step: int, allowed: list[str]
) -> tuple[str, str | None] | None:
    """The recorded run's direction and strategy at this step, when the generator replays one (ports.
    RecordedChoices) and the direction is allowed here."""
    if not isinstance(ctx.generator, RecordedChoices):
        return None
    recorded = ctx.generator.recorded_choice(state.task.key, step)
    return recorded if recorded is not None and recorded[0] in allowed else None


def _choose(
    ctx: RunContext,
    state: RunState,
    allowed: list[str],
    executable: set[str] | None,
    recorded: tuple[str, str | None] | None = None,
) -> Choice:
    name = ctx.config.policy
    if recorded is not None:
        # A replayed run: the recorded direction, taken with certainty, not drawn.
        direction = DirectionScore(key=recorded[0], score=0.0, support=0, probability=1.0)
    elif name is PolicyName.FLAT:
        return _choose_flat(ctx, state, allowed, executable)
    else:
        direction = _draw_direction(ctx, state, _undemoted(ctx, state, allowed, executable), executable)
    candidates = state.lessons.least_penalised(_locals(ctx, state, direction.key, executable))
    if not candidates:
        raise HtamError(f"direction {direction.key!r} has no applicable local strategy")
    settings, tags = ctx.settings, state.task.op_tags
    if executable is None:
        # Offered to an LLM: most relevant to the task first, then by this GPU's evidence.
        candidates = policy.rank_offers(
            memory.with_outcomes(ctx.store, candidates), tags, state.gpu_arch,
            settings.foreign_weight, settings.compile_penalty,
        )  # fmt: skip
    followed = [c for c in candidates if recorded is not None and c.strategy.key == recorded[1]]
    if followed:
        local = followed[0]
    elif name in (PolicyName.RANDOM, PolicyName.NO_LOCAL):
        local = candidates[state.rng.randrange(len(candidates))]
    elif executable is None:
        # Upper-confidence exploration among the most relevant strategies only.
        top = policy.relevance(candidates[0].strategy, tags)
        tier = [c for c in candidates if policy.relevance(c.strategy, tags) == top]
        local = policy.select_local(tier, state.rng, settings.local_explore_c)
    else:
        local = policy.select_local(candidates, state.rng, settings.local_explore_c)
    if name is PolicyName.NO_LOCAL:
        # The ablation: the generator acts on the global direction only, with no local memory.
        return Choice(direction, local if executable is not None else None, [])
    examples = memory.examples_for(ctx.store, local.strategy.key, tags or None)
    # An LLM may pick another strategy of the direction (the paper lets the LLM choose the local): it is
    # offered the others in the ranked order above (relevance, then evidence), and the one it names is
    # recorded. The rules act on the chosen one only.
    others = [c for c in candidates if c.strategy.key != local.strategy.key] if executable is None else []
    return Choice(direction, local, examples, others[:MAX_ALTERNATIVES])


def _draw_direction(
    ctx: RunContext, state: RunState, allowed: list[str], executable: set[str] | None
) -> DirectionScore:
    """Score the directions after the run's history and draw one among the allowed ones."""
    mode: policy.PolicyMode
    if ctx.config.policy is PolicyName.RANDOM:
        mode = policy.PolicyMode.RANDOM
    elif ctx.config.policy is PolicyName.NO_TRANSITION or not state.history:
        # With no trajectory yet there is no precedent to aggregate: start from each direction's own record.
        mode = policy.PolicyMode.NO_TRANSITION
    else:
        mode = policy.PolicyMode.HTG
    scores = memory.score_directions(
        ctx.store, state.history, gpu_arch=state.gpu_arch, settings=ctx.settings, mode=mode
    )
    excluded = [s.key for s in scores if s.key not in allowed]
    resting = policy.direction_to_rest(state.history, allowed) if executable is None else None
    if resting is not None:
        # An LLM is never sent the same direction three times in a row while another one is allowed.
        excluded.append(resting)
    direction = policy.sample_direction(scores, state.rng, exclude=excluded)
    # Record the chance the draw gave it (over the directions this task allows), not its share of all globals.
    return direction.model_copy(
        update={"probability": policy.drawn_probability(scores, direction.key, excluded)}
    )


def _choose_flat(ctx: RunContext, state: RunState, allowed: list[str], executable: set[str] | None) -> Choice:
    """Flat retrieval: the most similar past attempts, no hierarchy; reuse the best one's strategy."""
    task = state.task
    similar = memory.similar_attempts(ctx.store, task.op_tags, limit=5, exclude_task_key=task.key)
    usable = [a for a in similar if a.local_key and (executable is None or a.local_key in executable)]
    pool: list[LocalWithEvidence] = []
    for key in allowed:
        pool.extend(_locals(ctx, state, key, executable))
    pool = state.lessons.least_penalised(pool)
    by_key = {c.strategy.key: c for c in pool}
    positive = [
        a.local_key for a in usable if a.positive and a.local_key is not None and a.local_key in by_key
    ]
    if positive and state.rng.random() > 0.2:
        local = by_key[positive[0]]
    else:
        local = pool[state.rng.randrange(len(pool))]
    direction = DirectionScore(
        key=local.strategy.global_key, score=0.0, support=len(similar), probability=0.0
    )
    return Choice(direction, local, similar)


def _undemoted(
    ctx: RunContext, state: RunState, allowed: list[str], executable: set[str] | None
) -> list[str]:
    """The allowed directions with a strategy this run has not demoted (all of them when there is none)."""
    lessons = state.lessons
    if not lessons.penalties:
        return allowed
    fresh = [
        key
        for key in allowed
        if any(lessons.penalty(c.strategy.key) == 0 for c in _locals(ctx, state, key, executable))
    ]
    return fresh or allowed


def _locals(
    ctx: RunContext, state: RunState, global_key: str, executable: set[str] | None
) -> list[LocalWithEvidence]:
    """The local strategies of `global_key` the generator may be offered for this task."""
    found = state.locals_read.get(global_key)
    if found is None:
        found = memory.locals_for(
            ctx.store, global_key, language=ctx.config.language.value, op_tags=state.task.op_tags or None
        )
        state.locals_read[global_key] = found
    if executable is not None:
        # The rules' own test is stronger: a recipe matched the task's FX graph.
        return [c for c in found if c.strategy.key in executable]
    # An LLM is offered only strategies whose defining operation is in the task (policy.relevance) and that
    # the run's precision policy allows.
    return [
        c
        for c in found
        if policy.relevance(c.strategy, state.task.op_tags) is not None
        and policy.allowed_under(c.strategy, ctx.config.precision_policy)
    ]
