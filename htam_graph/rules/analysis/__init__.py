"""The analysis of a task's source: its forward traced by torch.fx and normalised into an `OpGraph`.

source.py is the entry (build on the meta device, trace, shape-propagate); normalise.py turns the fx nodes
into ops, helped by trace.py (fallbacks), casts.py, constants.py, functional.py, structural.py and views.py;
scalars.py finds numeric model attributes among the constants; skeleton.py keeps the parts of the source that
the generated `ModelNew` reuses.

Public API: `analyse_source(source) -> OpGraph` (cached by source; raises NotApplicable).
"""

from htam_graph.rules.analysis.source import analyse_source

__all__ = ["analyse_source"]
