"""The analysis of a task's source: its forward traced by torch.fx and normalised into an `OpGraph`
(`normalise.py`, with the trace fallbacks, casts, constants, functional and structural forms and views in the
modules beside it), and the parts of the source `ModelNew` reuses (`skeleton.py`).

Public API: `analyse_source(source) -> OpGraph` (cached by source; raises NotApplicable).
"""

from htam_graph.rules.analysis.normalise import analyse_source

__all__ = ["analyse_source"]
