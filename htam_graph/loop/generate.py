"""One step's generation: the request (base kernel, state summary, device facts, the offered strategies'
memory), the generator's reply, and the strategy the reply credits.

A backend failure of this call only (`StepInfraError`) becomes an infrastructure reply, recorded with no
evidence; a reply that is not there yet (`AwaitingReply`) stops the run at this step (`Awaiting`)."""

from __future__ import annotations

from htam_graph import memory
from htam_graph.devicefacts import GpuFacts
from htam_graph.errors import AwaitingReply, HtamError, StepInfraError
from htam_graph.loop.context import Choice, RunContext, RunState
from htam_graph.model import (
    NO_STRATEGY_KEY,
    GenerationReply,
    GenerationRequest,
    LocalStrategy,
    LocalWithEvidence,
)
from htam_graph.ports import FactsProvider
from htam_graph.runtypes import PendingStep, PolicyName
from htam_graph.state import memory_context, state_summary

__all__ = ["Awaiting", "answer_pending", "ask", "device_facts", "request_for"]


class Awaiting(Exception):
    """Carries a step whose reply is awaited from `ask` up to the run (never leaves the loop)."""

    def __init__(self, choice: Choice, request: GenerationRequest, prompt: dict[str, str]) -> None:
        super().__init__("awaiting reply")
        self.choice, self.request, self.prompt = choice, request, prompt


def request_for(ctx: RunContext, state: RunState, step: int, choice: Choice) -> GenerationRequest:
    """The request of step `step` for the policy's `choice`, made from the run's best so far."""
    cfg, result = ctx.config, state.result
    last = result.steps[-1] if result.steps else None
    return GenerationRequest(
        task=state.task,
        step=step,
        direction=state.directions[choice.direction.key],
        strategy=choice.local.strategy if choice.local else None,
        base_source=result.best_source,
        language=cfg.language,
        state_summary=state_summary(state.task, result, last, cfg.device),
        memory_context=memory_context(
            choice.local,
            choice.examples,
            alternatives=choice.alternatives,
            gpu_arch=_evidence_arch(ctx, state),
            foreign_weight=ctx.settings.foreign_weight,
            flat=cfg.policy is PolicyName.FLAT,
        ),
        device=cfg.device,
        gpu_facts=state.facts,
        seed=cfg.seed * 1000 + step,
        precision_policy=cfg.precision_policy,
        shape=cfg.shape,
        alternatives=[c.strategy for c in choice.alternatives],
    )


def answer_pending(
    ctx: RunContext, state: RunState, pending: PendingStep
) -> tuple[Choice, GenerationRequest, GenerationReply]:
    """The step a run stopped at, awaiting its reply: the same request and choice, now answered."""
    request = pending.request
    if pending.direction.key not in state.directions:
        raise HtamError(f"the pending request's direction {pending.direction.key!r} is not in the memory")
    choice = Choice(
        direction=pending.direction,
        local=LocalWithEvidence(strategy=request.strategy) if request.strategy else None,
        examples=[],
        alternatives=[LocalWithEvidence(strategy=s) for s in request.alternatives],
    )
    return choice, request, ask(ctx, state, choice, request)


def ask(ctx: RunContext, state: RunState, choice: Choice, request: GenerationRequest) -> GenerationReply:
    """The generator's reply to `request`; a failed call is an infrastructure reply, an awaited one stops
    the run (`Awaiting`). The strategy the reply names decides what the attempt is credited to."""
    choice.offered = tuple(c.strategy.key for c in ([choice.local] if choice.local else []))
    choice.offered += tuple(c.strategy.key for c in choice.alternatives)
    ctx.phase(request.step, "generating")
    try:
        reply = ctx.generator.generate(request)
    except StepInfraError as e:
        reply = GenerationReply(source=None, error=str(e), model=ctx.generator.name, infra_error=True)
    except AwaitingReply as e:
        raise Awaiting(choice, request, e.prompt) from e
    _credit(ctx, state, choice, reply.strategy_key)
    return reply


def _credit(ctx: RunContext, state: RunState, choice: Choice, named: str | None) -> None:
    """Credit the attempt: to the drawn local when the reply names none, to the named one when it was
    offered or is in the memory, to the direction only for "none" (no strategy applies) or an unknown key."""
    if named is None:
        choice.chosen = choice.local.strategy.key if choice.local else None
        return
    if named.lower() == NO_STRATEGY_KEY:
        choice.local, choice.chosen = None, NO_STRATEGY_KEY
        return
    offered = {
        c.strategy.key.lower(): c for c in [*([choice.local] if choice.local else []), *choice.alternatives]
    }
    if named.lower() in offered:
        choice.local = offered[named.lower()]
    else:
        known = _memory_locals(ctx, state).get(named.lower())
        choice.local = LocalWithEvidence(strategy=known) if known is not None else None
    choice.chosen = choice.local.strategy.key if choice.local else "unknown"


def _memory_locals(ctx: RunContext, state: RunState) -> dict[str, LocalStrategy]:
    """Every local strategy in the memory, by lower-cased key (read once per run, when first needed)."""
    if state.known_locals is None:
        state.known_locals = {
            c.strategy.key.lower(): c.strategy
            for g in memory.directions(ctx.store)
            for c in memory.locals_for(ctx.store, g.key)
        }
    return state.known_locals


def device_facts(ctx: RunContext, state: RunState) -> GpuFacts | None:
    """The evaluator's facts about the device and the task's reference (and the current best's profile), or
    None when the evaluator cannot tell them."""
    if not isinstance(ctx.evaluator, FactsProvider):
        return None
    result = state.result
    request = ctx.config.eval_request(
        state.task, result.best_source, seed=ctx.config.seed, trials=1, measure_baselines=False
    )
    if result.best_is_reference:
        request = request.model_copy(update={"candidate_kind": "reference"})
    return ctx.evaluator.device_facts(request)


def _evidence_arch(ctx: RunContext, state: RunState) -> str:
    """The architecture whose evidence the prompts call "this GPU's": the last evaluation's, else the
    facts'."""
    steps = state.result.steps
    last = steps[-1].result if steps else None
    if last is not None and last.gpu_arch:
        return last.gpu_arch
    if ctx.config.device == "cpu":
        return "cpu"
    return state.facts.gpu_arch if state.facts is not None else ""
