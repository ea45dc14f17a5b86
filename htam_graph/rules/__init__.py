"""The offline rule generator: executable local strategies that rewrite a task's `Model` into a Triton
`ModelNew`.

Public API: `RulesGenerator` (the `Generator` port, name "rules"), `recipes_for(task, device, language)`,
`applies(local_key, task)`. Importing this package does no work (torch is imported inside functions).
"""

from htam_graph.rules.base import Applicability, KernelConfig, NotApplicable, parse_header
from htam_graph.rules.generator import RulesGenerator, applies, recipes_for

__all__ = [
    "Applicability",
    "KernelConfig",
    "NotApplicable",
    "RulesGenerator",
    "applies",
    "parse_header",
    "recipes_for",
]
