"""The HTAM optimisation loop: pure orchestration over the ports (store, evaluator, generator).

One step (the paper's): summarise the state → pick the next global direction (Cypher precedent aggregation +
softmax policy) → choose a local strategy under it → generate the next candidate guided by that strategy's
memory → evaluate it with the hardened runtime → write the outcome back to the graph.

    run.py       `OptimizationLoop`: set-up, the steps, stopping, confirmation
    context.py   `RunContext` (the ports and settings), `RunState` (one run, step to step), `Choice`
    choose.py    the direction and local strategy of a step (and the repeated-candidate rule)
    generate.py  the request, the generator's reply, the strategy the reply credits
    evaluate.py  evaluation, adoption of a better kernel, the attempt written to the memory
    confirm.py   the returned kernel re-checked on fresh seeds

The run returns the best *correct* kernel, or the reference itself when nothing correct was faster: never an
incorrect kernel. Side effects other than the graph (files, progress display) belong to the caller, through
the `on_step` callback, which runs after every step so nothing is lost on a crash.
"""

from htam_graph.loop.context import ExecutableLocals
from htam_graph.loop.run import MAX_INFRA_ERRORS_IN_A_ROW, OptimizationLoop
from htam_graph.runtypes import POLICIES, PendingStep, PolicyName, Resume, RunConfig, RunResult, StepOutcome

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
