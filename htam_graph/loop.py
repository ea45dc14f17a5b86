"""The HTAM optimisation loop: pure orchestration over the ports (store, evaluator, generator).

One step (the paper's): summarise the state → pick the next global direction (Cypher precedent aggregation +
softmax policy) → choose a local strategy under it → generate the next candidate guided by that strategy's
memory → evaluate it with the hardened runtime → write the outcome back to the graph.

The run returns the best *correct* kernel, or the reference itself when nothing correct was faster: never an
incorrect kernel. Side effects other than the graph (files, progress display) belong to the caller, through
the `on_step` callback, which runs after every step so nothing is lost on a crash.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from htam_graph import memory, policy
from htam_graph.confirm import confirm_best
from htam_graph.devicefacts import GpuFacts
from htam_graph.errors import AwaitingReply, BackendError, HtamError, StepInfraError
from htam_graph.model import (
    NO_STRATEGY_KEY,
    AttemptExample,
    AttemptRecord,
    Device,
    DirectionScore,
    ErrorKind,
    EvalResult,
    GenerationReply,
    GenerationRequest,
    GlobalDirection,
    LocalStrategy,
    LocalWithEvidence,
    RunRecord,
    Task,
)
from htam_graph.ports import (
    EvaluationObserver,
    Evaluator,
    FactsProvider,
    Generator,
    GraphStore,
    ResumableGenerator,
)
from htam_graph.run_lessons import RunLessons, inputs_digest
from htam_graph.runtypes import (
    POLICIES,
    GenerationRecord,
    PendingStep,
    PolicyName,
    Resume,
    RunConfig,
    RunResult,
    StepOutcome,
)
from htam_graph.settings import PolicySettings
from htam_graph.state import memory_context, reference_as_candidate, state_summary

__all__ = [
    "MAX_INFRA_ERRORS_IN_A_ROW",
    "POLICIES",
    "ExecutableLocals",
    "OptimizationLoop",
    "PendingStep",
    "PolicyName",
    "Resume",
    "RunConfig",
    "RunResult",
    "StepOutcome",
]

log = logging.getLogger(__name__)

_MAX_ALTERNATIVES = 4  # other strategies under the chosen direction offered to an LLM
# A generator failing this many steps in a row (a command that keeps crashing, a model that never answers in
# time) ends the run: the failures add no evidence, so going on would only spend time.
MAX_INFRA_ERRORS_IN_A_ROW = 3


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


ExecutableLocals = Callable[[Task], Sequence[str]]
"""For generators that can only act on some strategies (the offline rules): the local keys they can execute."""


@dataclass
class _Choice:
    direction: DirectionScore
    local: LocalWithEvidence | None
    examples: list[AttemptExample]
    alternatives: list[LocalWithEvidence] = field(default_factory=list)
    # Set when the request is made: the drawn local first, then the alternatives.
    offered: tuple[str, ...] = ()
    chosen: str | None = None  # what the attempt is credited to (see GenerationRecord.chosen)


class _Awaiting(Exception):
    """Carries a step whose reply is awaited from `_ask` up to `run` (never leaves the loop)."""

    def __init__(self, choice: _Choice, request: GenerationRequest, prompt: dict[str, str]) -> None:
        super().__init__("awaiting reply")
        self.choice, self.request, self.prompt = choice, request, prompt


class OptimizationLoop:
    """Runs the HTAM loop for tasks, with the ports passed in."""

    def __init__(
        self,
        store: GraphStore,
        evaluator: Evaluator,
        generator: Generator,
        settings: PolicySettings,
        config: RunConfig,
        *,
        executable_locals: ExecutableLocals | None = None,
        on_step: Callable[[StepOutcome], None] | None = None,
        model_name: str = "",
        on_phase: Callable[[int, str], None] | None = None,
    ) -> None:
        """`on_step` runs after every step; `on_phase(step, phase)` when a step starts "generating" (waiting for
        the generator) and "evaluating" (the candidate is checked and timed), for progress displays."""
        self.store = store
        self.evaluator = evaluator
        self.generator = generator
        self.settings = settings
        self.config = config
        self.executable_locals = executable_locals
        self.on_step = on_step
        self.model_name = model_name
        self.on_phase = on_phase
        # Every local strategy in the memory, read once a run when a reply names one that was not offered.
        self._known_locals: dict[str, LocalStrategy] | None = None
        self._facts: GpuFacts | None = (
            None  # the run's device facts (LLM generators only), refreshed with the best
        )

    # ------------------------------------------------------------------------------------------- the run
    def run(self, task: Task, resume: Resume | None = None) -> RunResult:
        """Optimise one task for `config.steps` steps; return the best correct candidate.

        With `resume`, continue a run that was cut after its first steps: its state (direction history, best
        so far, candidates already evaluated) is rebuilt from those steps and the run goes on at the next one,
        under the same run key. Its policy draws then come from a fresh stream (seeded by the step count), so a
        resumed run is a valid run of the policy but not the one an uncut run would have drawn; except after a
        stop awaiting a reply (`resume.pending`): that step continues with its saved request and the policy's
        saved random state, so the run goes on exactly as if the reply had come at once.

        When the generator has no reply yet (`AwaitingReply`), the run stops at that step: `stopped_reason` is
        "awaiting_reply", `pending` holds the step, and the returned best is not confirmed (the run goes on).
        """
        cfg = self.config
        done = len(resume.steps) if resume else 0
        pending = resume.pending if resume else None
        if pending is not None and pending.step != done + 1:
            raise HtamError(f"the pending request is for step {pending.step}, but {done} step(s) were made")
        rng = random.Random(
            f"{cfg.seed}:{task.key}:{cfg.policy}" + (f":resumed-after-{done}" if done else "")
        )
        if pending is not None:
            rng.setstate(pending.rng_state)
        self._known_locals = None
        run_key = resume.run_key if resume else f"run-{uuid.uuid4().hex[:12]}"
        reference = reference_as_candidate(task.source)
        result = RunResult(run_key, task.key, reference, True, None, 1.0, None)
        executable = set(self.executable_locals(task)) if self.executable_locals else None
        directions = {d.key: d for d in memory.directions(self.store)}
        allowed = self._allowed_directions(directions, task, executable)
        if not allowed:
            result.stopped_reason = "no strategy in the memory applies to this task"
            return result
        if cfg.record:
            memory.record_run(
                self.store,
                RunRecord(
                    key=run_key,
                    task_key=task.key,
                    backend=self.generator.name,
                    policy=cfg.policy,
                    model=self.model_name,
                    started_ms=memory.now_ms(),
                    precision_policy=cfg.precision_policy,
                    seed=cfg.seed,
                ),
            )
        history: list[str] = []
        gpu_arch = ""
        prev_attempt: str | None = None
        evaluated: set[str] = set()  # sha256 of every candidate evaluated in this run
        lessons = RunLessons()  # this run's own failures (run_lessons.py)
        for outcome in resume.steps if resume else ():  # the steps made before the cut, as they were
            _learn(lessons, outcome, result.best_source)
            gpu_arch = _replay(result, outcome) or gpu_arch
            if outcome.source is not None:
                evaluated.add(_digest(outcome.source))
            history.append(outcome.global_key)
            prev_attempt = outcome.attempt_key
            result.steps.append(outcome)
        if resume is not None and isinstance(self.generator, ResumableGenerator):
            answered = [o.step for o in resume.steps if not (o.generation and o.generation.infra_error)]
            self.generator.resumed(task.key, answered)
        infra_in_a_row = 0
        # An LLM is told what the device is (GpuFacts); the facts also name the GPU architecture whose evidence
        # the policy weighs before the first evaluation has reported it.
        self._facts = self._device_facts(task, result) if executable is None else None
        if self._facts is not None and self._facts.device == "cuda":
            gpu_arch = gpu_arch or self._facts.gpu_arch
        for step in range(done + 1, cfg.steps + 1):
            try:
                picked: tuple[_Choice, GenerationRequest, GenerationReply] | None
                if pending is not None and step == pending.step:
                    picked = self._answer_pending(pending, directions)
                else:
                    picked = self._choose_new_candidate(
                        task, step, history, gpu_arch, directions, executable, allowed, result, evaluated, rng,
                        lessons,
                    )  # fmt: skip
            except _Awaiting as e:
                result.pending = PendingStep(
                    step=step,
                    request=e.request,
                    direction=e.choice.direction,
                    rng_state=rng.getstate(),
                    prompt=e.prompt,
                    backend=self.generator.name,
                )
                result.stopped_reason = "awaiting_reply"
                return result  # not finished: nothing to confirm yet
            except BackendError as e:
                # A spent budget or a transport failure after retries ends the run cleanly: every step so far
                # is already recorded, and the caller reports `backend_error` (exit 1 in the CLI).
                result.stopped_reason = str(e)
                result.backend_error = e
                break
            if picked is None:
                result.stopped_reason = (
                    "every applicable strategy's candidate was already evaluated in this run"
                )
                if lessons.banned:
                    result.stopped_reason += ", or raised on the same inputs"
                break
            choice, request, reply = picked
            if reply.source is not None:
                evaluated.add(_digest(reply.source))
            base = result.best_source  # what the candidate was generated from (before this step's adoption)
            outcome = self._evaluate_and_record(
                task, step, choice, reply, result, history, prev_attempt, run_key, gpu_arch
            )
            _learn(lessons, outcome, base)
            if outcome.result is not None and outcome.result.gpu_arch:
                gpu_arch = outcome.result.gpu_arch
            if self._facts is not None and self.config.device == "cuda" and result.best_step == step:
                self._facts = self._device_facts(task, result) or self._facts  # profile the new best
            if cfg.record and isinstance(self.generator, EvaluationObserver):
                # e.g. the rules' autotune cache learns the runtime the evaluator measured for this kernel
                self.generator.observe(request, reply, outcome.result)
            history.append(choice.direction.key)
            prev_attempt = outcome.attempt_key
            result.steps.append(outcome)
            if self.on_step:
                self.on_step(outcome)
            infra_in_a_row = infra_in_a_row + 1 if reply.infra_error else 0
            if infra_in_a_row >= MAX_INFRA_ERRORS_IN_A_ROW:
                result.backend_error = BackendError(
                    f"{self.generator.name}: {infra_in_a_row} steps in a row got no reply "
                    f"(last: {reply.error}); the run stopped"
                )
                result.stopped_reason = str(result.backend_error)
                break
        result.stopped_reason = result.stopped_reason or f"{cfg.steps} steps done"
        failed = confirm_best(self.evaluator, cfg, task, result, reference)
        if cfg.record:
            for n, (outcome, check) in enumerate(failed, start=1):
                memory.record_attempt(
                    self.store, _confirmation_attempt(run_key, task, cfg, n, outcome, check)
                )
        return result

    # ------------------------------------------------------------------------------------------- choice
    def _choose_new_candidate(
        self,
        task: Task,
        step: int,
        history: list[str],
        gpu_arch: str,
        directions: dict[str, GlobalDirection],
        executable: set[str] | None,
        allowed: list[str],
        result: RunResult,
        evaluated: set[str],
        rng: random.Random,
        lessons: RunLessons,
    ) -> tuple[_Choice, GenerationRequest, GenerationReply] | None:
        """Choose and generate the step's candidate. With a deterministic generator (the rules: `executable` is
        set) a strategy whose candidate is byte-identical to one already evaluated in this run is set aside for
        this step and the choice is made again among the rest: re-timing the same kernel teaches nothing and
        spent whole runs (H200, stop 11: level1/68 evaluated the same channels-last kernel six times). None when
        every applicable strategy repeats itself. An LLM's replies are evaluated as they come. A strategy whose
        candidate raised on the same inputs earlier in the run is not offered again (run_lessons.py)."""
        usable, allowed_now = executable, allowed
        banned = lessons.banned_locals(inputs_digest(result.best_source))
        if usable is not None and banned & usable:
            usable = usable - banned
            allowed_now = self._allowed_directions(directions, task, usable)
            if not allowed_now:
                return None
        while True:
            choice = self._choose(task, history, gpu_arch, allowed_now, usable, rng, lessons)
            request = self._request(task, step, choice, result, directions)
            reply = self._ask(choice, request)
            repeated = reply.source is not None and _digest(reply.source) in evaluated
            if usable is None or choice.local is None or not repeated:
                return choice, request, reply
            usable = usable - {choice.local.strategy.key}
            allowed_now = self._allowed_directions(directions, task, usable)
            if not allowed_now:
                return None

    def _allowed_directions(
        self, directions: dict[str, GlobalDirection], task: Task, executable: set[str] | None
    ) -> list[str]:
        """Directions with at least one local strategy that fits the task, the language and the generator."""
        return [key for key in sorted(directions) if self._locals(task, key, executable)]

    def _choose(
        self,
        task: Task,
        history: list[str],
        gpu_arch: str,
        allowed: list[str],
        executable: set[str] | None,
        rng: random.Random,
        lessons: RunLessons,
    ) -> _Choice:
        cfg = self.config
        if cfg.policy == "flat":
            return self._choose_flat(task, allowed, executable, rng, lessons)
        allowed = self._undemoted(task, allowed, executable, lessons)
        mode: policy.PolicyMode
        if cfg.policy == "random":
            mode = "random"
        elif cfg.policy == "no-transition" or not history:
            # With no trajectory yet there is no precedent to aggregate: start from each direction's own record.
            mode = "no-transition"
        else:
            mode = "htg"
        scores = memory.score_directions(
            self.store, history, gpu_arch=gpu_arch, settings=self.settings, mode=mode
        )
        excluded = [s.key for s in scores if s.key not in allowed]
        resting = policy.direction_to_rest(history, allowed) if executable is None else None
        if resting is not None:
            # An LLM is never sent the same direction three times in a row while another one is allowed.
            excluded.append(resting)
        direction = policy.sample_direction(scores, rng, exclude=excluded)
        # Record the chance the draw gave it (over the directions this task allows), not its share of all globals.
        direction = direction.model_copy(
            update={"probability": policy.drawn_probability(scores, direction.key, excluded)}
        )
        candidates = lessons.least_penalised(self._locals(task, direction.key, executable))
        if not candidates:
            raise HtamError(f"direction {direction.key!r} has no applicable local strategy")
        if executable is None:
            # Offered to an LLM: most relevant to the task first, then by this GPU's evidence.
            candidates = policy.rank_offers(
                memory.with_outcomes(self.store, candidates), task.op_tags, gpu_arch,
                self.settings.foreign_weight, self.settings.compile_penalty,
            )  # fmt: skip
        if cfg.policy == "random" or cfg.policy == "no-local":
            local = candidates[rng.randrange(len(candidates))]
        elif executable is None:
            # Upper-confidence exploration among the most relevant strategies only.
            top = policy.relevance(candidates[0].strategy, task.op_tags)
            tier = [c for c in candidates if policy.relevance(c.strategy, task.op_tags) == top]
            local = policy.select_local(tier, rng, self.settings.local_explore_c)
        else:
            local = policy.select_local(candidates, rng, self.settings.local_explore_c)
        if cfg.policy == "no-local":
            # The ablation: the generator acts on the global direction only, with no local memory.
            return _Choice(direction, local if executable is not None else None, [])
        examples = memory.examples_for(self.store, local.strategy.key, task.op_tags or None)
        # An LLM may pick another strategy of the direction (the paper lets the LLM choose the local): it is
        # offered the others in the ranked order above (relevance, then evidence), and the one it names is
        # recorded. The rules act on the chosen one only.
        others = [c for c in candidates if c.strategy.key != local.strategy.key] if executable is None else []
        return _Choice(direction, local, examples, others[:_MAX_ALTERNATIVES])

    def _choose_flat(
        self,
        task: Task,
        allowed: list[str],
        executable: set[str] | None,
        rng: random.Random,
        lessons: RunLessons,
    ) -> _Choice:
        """Flat retrieval: the most similar past attempts, no hierarchy; reuse the best one's strategy."""
        similar = memory.similar_attempts(self.store, task.op_tags, limit=5, exclude_task_key=task.key)
        usable = [a for a in similar if a.local_key and (executable is None or a.local_key in executable)]
        pool: list[LocalWithEvidence] = []
        for key in allowed:
            pool.extend(self._locals(task, key, executable))
        pool = lessons.least_penalised(pool)
        by_key = {c.strategy.key: c for c in pool}
        positive = [a for a in usable if a.positive and a.local_key in by_key]
        if positive and rng.random() > 0.2:
            local = by_key[positive[0].local_key]  # type: ignore[index]
        else:
            local = pool[rng.randrange(len(pool))]
        direction = DirectionScore(
            key=local.strategy.global_key, score=0.0, support=len(similar), probability=0.0
        )
        return _Choice(direction, local, similar)

    def _undemoted(
        self, task: Task, allowed: list[str], executable: set[str] | None, lessons: RunLessons
    ) -> list[str]:
        """The allowed directions with a strategy this run has not demoted (all of them when there is none)."""
        if not lessons.penalties:
            return allowed
        fresh = [
            key
            for key in allowed
            if any(lessons.penalty(c.strategy.key) == 0 for c in self._locals(task, key, executable))
        ]
        return fresh or allowed

    def _locals(self, task: Task, global_key: str, executable: set[str] | None) -> list[LocalWithEvidence]:
        found = memory.locals_for(
            self.store, global_key, language=self.config.language.value, op_tags=task.op_tags or None
        )
        if executable is not None:
            # The rules' own test is stronger: a recipe matched the task's FX graph.
            found = [c for c in found if c.strategy.key in executable]
        else:
            # An LLM is offered only strategies whose defining operation is in the task (policy.relevance)
            # and that the run's precision policy allows.
            found = [
                c
                for c in found
                if policy.relevance(c.strategy, task.op_tags) is not None
                and policy.allowed_under(c.strategy, self.config.precision_policy)
            ]
        return found

    def _device_facts(self, task: Task, result: RunResult) -> GpuFacts | None:
        """The evaluator's facts about the device and the task's reference (and the current best's profile), or
        None when the evaluator cannot tell them."""
        if not isinstance(self.evaluator, FactsProvider):
            return None
        request = self.config.eval_request(
            task, result.best_source, seed=self.config.seed, trials=1, measure_baselines=False
        )
        if result.best_is_reference:
            request = request.model_copy(update={"candidate_kind": "reference"})
        return self.evaluator.device_facts(request)

    def _arch(self, result: RunResult) -> str:
        """The architecture whose evidence the prompts call "this GPU's": the last evaluation's, else the facts'."""
        last = result.steps[-1].result if result.steps else None
        if last is not None and last.gpu_arch:
            return last.gpu_arch
        if self.config.device == "cpu":
            return "cpu"
        return self._facts.gpu_arch if self._facts is not None else ""

    # ------------------------------------------------------------------------------------------- generate
    def _request(
        self,
        task: Task,
        step: int,
        choice: _Choice,
        result: RunResult,
        directions: dict[str, GlobalDirection],
    ) -> GenerationRequest:
        last = result.steps[-1] if result.steps else None
        gpu_arch = self._arch(result)
        return GenerationRequest(
            task=task,
            step=step,
            direction=directions[choice.direction.key],
            strategy=choice.local.strategy if choice.local else None,
            base_source=result.best_source,
            language=self.config.language,
            state_summary=state_summary(task, result, last, self.config.device),
            memory_context=memory_context(
                choice.local,
                choice.examples,
                alternatives=choice.alternatives,
                gpu_arch=gpu_arch,
                foreign_weight=self.settings.foreign_weight,
                flat=self.config.policy == "flat",
            ),
            device=self.config.device,
            gpu_facts=self._facts,
            seed=self.config.seed * 1000 + step,
            precision_policy=self.config.precision_policy,
            shape=self.config.shape,
            alternatives=[c.strategy for c in choice.alternatives],
        )

    def _answer_pending(
        self, pending: PendingStep, directions: dict[str, GlobalDirection]
    ) -> tuple[_Choice, GenerationRequest, GenerationReply]:
        """The step a run stopped at, awaiting its reply: the same request and choice, now answered."""
        request = pending.request
        if pending.direction.key not in directions:
            raise HtamError(f"the pending request's direction {pending.direction.key!r} is not in the memory")
        choice = _Choice(
            direction=pending.direction,
            local=LocalWithEvidence(strategy=request.strategy) if request.strategy else None,
            examples=[],
            alternatives=[LocalWithEvidence(strategy=s) for s in request.alternatives],
        )
        return choice, request, self._ask(choice, request)

    def _ask(self, choice: _Choice, request: GenerationRequest) -> GenerationReply:
        """The generator's reply to `request`; a failed call is an infrastructure reply, an awaited one stops
        the run (`_Awaiting`). The strategy the reply names decides what the attempt is credited to."""
        choice.offered = tuple(c.strategy.key for c in ([choice.local] if choice.local else []))
        choice.offered += tuple(c.strategy.key for c in choice.alternatives)
        if self.on_phase:
            self.on_phase(request.step, "generating")
        try:
            reply = self.generator.generate(request)
        except StepInfraError as e:
            reply = GenerationReply(source=None, error=str(e), model=self.generator.name, infra_error=True)
        except AwaitingReply as e:
            raise _Awaiting(choice, request, e.prompt) from e
        self._credit(choice, reply.strategy_key)
        return reply

    def _credit(self, choice: _Choice, named: str | None) -> None:
        """Credit the attempt: to the drawn local when the reply names none, to the named one when it was
        offered or is in the memory, to the direction only for "none" (no strategy applies) or an unknown key."""
        if named is None:
            choice.chosen = choice.local.strategy.key if choice.local else None
            return
        if named.lower() == NO_STRATEGY_KEY:
            choice.local, choice.chosen = None, NO_STRATEGY_KEY
            return
        offered = {
            c.strategy.key.lower(): c
            for c in [*([choice.local] if choice.local else []), *choice.alternatives]
        }
        if named.lower() in offered:
            choice.local = offered[named.lower()]
        else:
            known = self._memory_locals().get(named.lower())
            choice.local = LocalWithEvidence(strategy=known) if known is not None else None
        choice.chosen = choice.local.strategy.key if choice.local else "unknown"

    def _memory_locals(self) -> dict[str, LocalStrategy]:
        """Every local strategy in the memory, by lower-cased key (read once per run, when first needed)."""
        if self._known_locals is None:
            self._known_locals = {
                c.strategy.key.lower(): c.strategy
                for g in memory.directions(self.store)
                for c in memory.locals_for(self.store, g.key)
            }
        return self._known_locals

    # ------------------------------------------------------------------------------------------- evaluate
    def _evaluate_and_record(
        self,
        task: Task,
        step: int,
        choice: _Choice,
        reply: GenerationReply,
        result: RunResult,
        history: list[str],
        prev_attempt: str | None,
        run_key: str,
        gpu_arch: str,
    ) -> StepOutcome:
        cfg = self.config
        attempt_key = f"{run_key}-s{step}"
        evaluation: EvalResult | None = None
        if (
            reply.infra_error
        ):  # the backend failed, not the model: recorded, but no evidence (memory.is_evidence)
            error_kind: ErrorKind | None = ErrorKind.INFRA_ERROR
            excerpt = reply.error or "the generator failed"
            correct = compiled = False
            speedup = None
        elif reply.source is None:
            error_kind = ErrorKind.NO_CODE
            excerpt = reply.error or "the generator returned no code"
            correct = compiled = False
            speedup = None
        else:
            # torch.compile of the reference costs seconds: it is measured once per run, at the first timed step.
            if self.on_phase:
                self.on_phase(step, "evaluating")
            evaluation = self.evaluator.evaluate(
                cfg.eval_request(
                    task,
                    reply.source,
                    seed=cfg.seed + step,
                    trials=cfg.trials,
                    measure_baselines=result.ref_compile_us is None,
                )
            )
            _note_references(result, evaluation)
            error_kind, excerpt = evaluation.error_kind, evaluation.error_excerpt
            correct, compiled = evaluation.correct, evaluation.compiled
            speedup = evaluation.speedup_eager_x
        before = result.best_speedup_x
        # Wins on degenerate tasks, or timed on the CPU (interpreted Triton), teach nothing about GPU speed:
        # such attempts are recorded with gain 0 and never count as positive evidence.
        timed = evaluation is not None and not evaluation.task_degenerate and not evaluation.timing_on_cpu
        gain = math.log(speedup / before) if correct and timed and speedup and speedup > 0 else 0.0
        status: Literal["improved", "correct", "failed"]
        if correct and gain > 0:
            status = "improved"
        elif correct:
            status = "correct"
        else:
            status = "failed"
        _adopt(result, step, status, reply.source, evaluation, speedup)
        source_hash = hashlib.sha256(reply.source.encode()).hexdigest() if reply.source else None
        # Where it ran, as the evaluation says (an attempt without one ran nowhere: the run's device).
        device: Device = cfg.device
        if evaluation is not None:
            device = "cpu" if evaluation.timing_on_cpu else evaluation.device
        record = AttemptRecord(
            key=attempt_key,
            run_key=run_key,
            task_key=task.key,
            step=step,
            global_key=choice.direction.key,
            local_key=choice.local.strategy.key if choice.local else None,
            prev_global_key=history[-1] if history else None,
            prev_attempt_key=prev_attempt,
            status=status,
            error_kind=error_kind,
            compiled=compiled,
            correct=correct,
            speedup_x=speedup,
            gain=gain,
            runtime_us=evaluation.runtime_us if evaluation else None,
            gpu_name=evaluation.gpu_name if evaluation else "",
            gpu_arch=(evaluation.gpu_arch if evaluation else "")
            or (memory.CPU_ARCH if device == "cpu" else gpu_arch),
            precision_policy=cfg.precision_policy,
            kernel_language=evaluation.language if evaluation else None,
            kernel_source=reply.source,
            kernel_sha256=source_hash,
            created_ms=memory.now_ms(),
            device=device,
        )
        if cfg.record:
            memory.record_attempt(self.store, record)
        return StepOutcome(
            step=step,
            global_key=choice.direction.key,
            local_key=record.local_key,
            direction_probability=choice.direction.probability,
            status=status,
            error_kind=error_kind,
            error_excerpt=excerpt,
            speedup_x=speedup,
            best_speedup_x=result.best_speedup_x,
            gain=gain,
            source=reply.source,
            result=evaluation,
            usage=reply.usage,
            attempt_key=attempt_key,
            generation=GenerationRecord(
                offered=choice.offered,
                named=reply.strategy_key,
                chosen=choice.chosen,
                extraction=reply.extraction,
                finish_reason=reply.finish_reason,
                truncated=reply.truncated,
                latency_s=reply.latency_s,
                attempts=reply.attempts,
                model=reply.model,
                infra_error=reply.infra_error,
                raw_text=reply.raw_text,
            ),
        )


def _note_references(result: RunResult, evaluation: EvalResult) -> None:
    """Keep where the run was first measured and the first reference timings it got."""
    result.first_result = result.first_result or evaluation
    if result.ref_compile_us is None and evaluation.ref_compile_us:
        result.ref_compile_us = evaluation.ref_compile_us
    if result.ref_eager_us is None and evaluation.ref_eager_us:
        result.ref_eager_us = evaluation.ref_eager_us


def _adopt(
    result: RunResult,
    step: int,
    status: str,
    source: str | None,
    evaluation: EvalResult | None,
    speedup: float | None,
) -> None:
    """Make step `step`'s candidate the run's best when it improved on it.

    On the CPU speed is not measurable, so every correct kernel becomes the best: the latest correct candidate is
    the base of the next step (a stateless model then keeps its own latest working changes) and `best.py` is a
    real kernel; its speed-up stays unclaimed (1.0) until it is timed on a GPU. Not on a degenerate task timed on
    a GPU: its correctness check cannot tell a real kernel from a copy of the input, and its speed was measured
    (H200 bench: LeakyReLU and HardTanh of non-negative inputs returned 0.93x kernels reported as 1.0x), so the
    reference stays.
    """
    on_cpu = evaluation is not None and evaluation.timing_on_cpu
    adopt_untimed = status != "failed" and on_cpu
    if (status == "improved" or adopt_untimed) and source is not None:
        result.best_source, result.best_is_reference = source, False
        result.best_step, result.best_result = step, evaluation
        if status == "improved":
            result.best_speedup_x = speedup or result.best_speedup_x


def _learn(lessons: RunLessons, outcome: StepOutcome, base_source: str) -> None:
    """Take a step's failure into the run's lessons (run_lessons.py): a repeated error class demotes its
    strategy for the rest of the run; a candidate that raised bans its strategy on the same base kernel."""
    if lessons.learn(
        outcome.local_key, outcome.error_kind, outcome.error_excerpt, inputs_digest(base_source)
    ):
        log.info(
            "step %d: %s failed again with an error class seen earlier in the run; demoted for the rest of it",
            outcome.step,
            outcome.local_key,
        )


def _replay(result: RunResult, outcome: StepOutcome) -> str:
    """Apply a step made before a cut to `result` as `_evaluate_and_record` did; return its GPU arch."""
    if outcome.result is not None:
        _note_references(result, outcome.result)
    _adopt(result, outcome.step, outcome.status, outcome.source, outcome.result, outcome.speedup_x)
    return outcome.result.gpu_arch if outcome.result is not None else ""


def _confirmation_attempt(
    run_key: str, task: Task, cfg: RunConfig, n: int, confirmed: StepOutcome, check: EvalResult
) -> AttemptRecord:
    """A failed confirmation as an attempt of the same strategy on the same kernel: negative evidence that
    balances the positive evidence its step earned. Numbered after the run's steps; it opens no transition (it
    re-checks a kernel, it is not a move between directions) and FOLLOWS the attempt it re-checked."""
    source = confirmed.source or ""
    return AttemptRecord(
        key=f"{run_key}-c{n}",
        run_key=run_key,
        task_key=task.key,
        step=cfg.steps + n,
        global_key=confirmed.global_key,
        local_key=confirmed.local_key,
        prev_global_key=None,
        prev_attempt_key=confirmed.attempt_key,
        status="failed",
        error_kind=check.error_kind or ErrorKind.MISMATCH,
        compiled=check.compiled,
        correct=False,
        speedup_x=None,
        gain=0.0,
        runtime_us=None,
        gpu_name=check.gpu_name,
        gpu_arch=check.gpu_arch,
        precision_policy=cfg.precision_policy,
        kernel_language=check.language,
        kernel_source=source,
        kernel_sha256=hashlib.sha256(source.encode()).hexdigest(),
        created_ms=memory.now_ms(),
    )
