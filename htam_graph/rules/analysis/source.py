"""Analyse a task's reference forward with torch.fx into a small typed op graph (`htam_graph.rules.ops`).

The model and its inputs are built on the meta device (the task's own sizes, no memory, no arithmetic), traced
with `torch.fx.symbolic_trace` (with fallbacks for `fn=` defaults and shape introspection: trace.py),
shape-propagated and normalised (normalise.py); numeric model attributes are then found among its constants
(scalars.py).
"""

from __future__ import annotations

import types
import warnings
from typing import Any

from htam_graph.rules.analysis.normalise import normalise
from htam_graph.rules.analysis.scalars import with_attribute_scalars
from htam_graph.rules.analysis.trace import trace_model
from htam_graph.rules.base import NotApplicable, cached_by_source
from htam_graph.rules.ops import OpGraph

__all__ = ["analyse_source", "load_namespace"]


def load_namespace(source: str, name: str = "task") -> dict[str, Any]:
    """Execute a task source in a fresh namespace (not registered in sys.modules)."""
    module = types.ModuleType(name)
    try:
        exec(compile(source, f"<task {name}>", "exec"), module.__dict__)  # noqa: S102 - the task is the input
    except Exception as e:  # the task's own code: any error means "cannot analyse"
        raise NotApplicable(f"the task source failed to load: {type(e).__name__}: {e}") from e
    for required in ("Model", "get_inputs", "get_init_inputs"):
        if required not in module.__dict__:
            raise NotApplicable(f"the task source defines no {required}")
    return module.__dict__


@cached_by_source
def analyse_source(source: str) -> OpGraph:
    """The op graph of the task's `Model.forward` at the task's own sizes. Raises NotApplicable.

    Results (graphs and reasons alike) are cached by source: `recipes_for` asks once per recipe.
    """
    import torch

    namespace = load_namespace(source)
    with torch.device("meta"):
        try:
            init_inputs = list(namespace["get_init_inputs"]())
            model = namespace["Model"](*init_inputs)
            inputs = list(namespace["get_inputs"]())
        except Exception as e:
            raise NotApplicable(
                f"building the model on the meta device failed: {type(e).__name__}: {e}"
            ) from e
    traced = trace_model(model, inputs)
    gm = traced.module
    try:
        from torch.fx.passes.shape_prop import ShapeProp

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the task's own module warnings are not ours to raise
            ShapeProp(gm).propagate(*inputs)
    except Exception as e:
        raise NotApplicable(f"shape propagation failed: {type(e).__name__}: {e}") from e
    graph = normalise(gm, with_shapes=True)
    if traced.shape_specialised:
        import dataclasses

        graph = dataclasses.replace(graph, shape_specialised=True)
    return with_attribute_scalars(graph, namespace, init_inputs, model, inputs)
