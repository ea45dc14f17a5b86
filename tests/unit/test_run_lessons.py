"""A run's lessons from its own failures (htam_graph/run_lessons.py): error classes, demotion, bans."""

from __future__ import annotations

from htam_graph.model import ErrorKind, Language, LocalStrategy, LocalWithEvidence
from htam_graph.run_lessons import RunLessons, error_class, inputs_digest

ATTRIBUTE = (
    "  candidate_1.py:40 in forward: return k(self._tensor_constant0)\n"
    "AttributeError: 'ModelNew' object has no attribute '_tensor_constant0'"
)


def _local(key: str) -> LocalWithEvidence:
    return LocalWithEvidence(
        strategy=LocalStrategy(key=key, name=key, global_key="g", languages=[Language.TRITON], pattern="")
    )


def test_error_class_names_the_exception_of_compile_and_runtime_errors() -> None:
    assert error_class(ErrorKind.RUNTIME_ERROR, ATTRIBUTE) == "runtime_error:AttributeError"
    triton = "  candidate_2.py:12 in forward: k[grid](x)\ntriton.compiler.errors.CompilationError: at 3:4"
    assert error_class(ErrorKind.COMPILE_ERROR, triton) == "compile_error:CompilationError"
    assert error_class(ErrorKind.RUNTIME_ERROR, "no exception line here") == "runtime_error"
    assert error_class(ErrorKind.MISMATCH, "trial 2: 3/64 elements outside") == "mismatch"
    assert error_class(ErrorKind.INFRA_ERROR, "harness: out of memory") is None  # not the strategy's failure
    assert error_class(None, "") is None


def test_a_repeated_error_class_demotes_every_strategy_that_failed_with_it() -> None:
    lessons = RunLessons()
    ref = inputs_digest("reference source")
    assert not lessons.learn("a", ErrorKind.RUNTIME_ERROR, ATTRIBUTE, ref)  # first of its class: no demotion
    assert lessons.penalty("a") == 0
    assert not lessons.learn("b", ErrorKind.MISMATCH, "outside tolerance", ref)
    assert lessons.learn("c", ErrorKind.RUNTIME_ERROR, ATTRIBUTE, ref)  # the class repeats
    assert (lessons.penalty("a"), lessons.penalty("b"), lessons.penalty("c")) == (1, 0, 1)
    chosen = lessons.least_penalised([_local("a"), _local("b"), _local("c"), _local("d")])
    assert [c.strategy.key for c in chosen] == ["b", "d"]
    # when every candidate is demoted, the least demoted remain
    assert lessons.learn("a", ErrorKind.RUNTIME_ERROR, ATTRIBUTE, ref)
    assert [c.strategy.key for c in lessons.least_penalised([_local("a"), _local("c")])] == ["c"]
    assert not lessons.learn("e", ErrorKind.INFRA_ERROR, "worker lost", ref)


def test_a_strategy_whose_candidate_raised_is_banned_on_the_same_inputs_only() -> None:
    lessons = RunLessons()
    ref, better = inputs_digest("reference"), inputs_digest("a faster kernel")
    lessons.learn("a", ErrorKind.NO_CODE, "fusion.x raised on t: KeyError: 'y'", ref)
    lessons.learn("b", ErrorKind.MISMATCH, "outside tolerance", ref)  # wrong, but it did not raise
    lessons.learn("c", ErrorKind.COMPILE_ERROR, "CompilationError: bad", ref)
    assert lessons.banned_locals(ref) == {"a", "c"}
    assert lessons.banned_locals(better) == set()


def test_a_strategy_that_mismatched_twice_on_the_same_inputs_is_banned() -> None:
    lessons = RunLessons()
    ref, better = inputs_digest("reference"), inputs_digest("a faster kernel")
    lessons.learn("tune", ErrorKind.MISMATCH, "outside tolerance", ref)
    lessons.learn("tune", ErrorKind.MISMATCH, "outside tolerance", better)  # other inputs: counted apart
    assert lessons.banned_locals(ref) == set() and lessons.banned_locals(better) == set()
    lessons.learn("tune", ErrorKind.MISMATCH, "outside tolerance", ref)
    assert lessons.banned_locals(ref) == {"tune"} and lessons.banned_locals(better) == set()
