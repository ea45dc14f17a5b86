"""What the worker changes when Triton runs in its interpreter (`TRITON_INTERPRET=1`, CPU evaluations).

`@triton.autotune` benchmarks every config it is given with the GPU driver's timers before the first launch; the
interpreter has no GPU driver, so a candidate with two or more configs failed on the CPU with "0 active drivers"
although its kernel is fine. Under the interpreter the decorator is given only its FIRST config (Triton's
`Autotuner` then launches it without benchmarking), so the candidate's kernel runs and its correctness is checked.
Timings mean nothing there anyway. On a GPU nothing is changed.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["autotune_first_config", "interpreting"]


def interpreting() -> bool:
    """Triton runs in its interpreter in this process."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def autotune_first_config() -> bool:
    """Under the interpreter, make `triton.autotune` (every name it is reachable by) keep its first config only.
    Installed by the worker before any candidate is imported; returns whether it was installed."""
    if not interpreting():
        return False
    import triton
    import triton.runtime
    import triton.runtime.autotuner as autotuner

    original = autotuner.autotune
    if getattr(original, "_htam_first_config", False):
        return True

    @functools.wraps(original)
    def first_config(configs: Sequence[Any], key: Any, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        decorator: Callable[[Any], Any] = original(list(configs)[:1], key, *args, **kwargs)
        return decorator

    first_config._htam_first_config = True  # type: ignore[attr-defined]
    for module in (triton, triton.runtime, autotuner):
        if getattr(module, "autotune", None) is original:
            module.autotune = first_config
    return True
