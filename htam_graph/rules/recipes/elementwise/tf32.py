"""precision.tf32_matmul / precision.tf32_convolution: the library op on TF32 tensor cores (tf32 policy only).

The kernel is `fusion.library_epilogue`'s (library call + one fused fp32 Triton epilogue); the library call
alone runs inside a context manager that enables TF32 for that call and restores the previous switch on exit,
so the reference (computed by the harness with its own pinned flags) and the rest of the process are never
affected. These recipes exist only under the run's `tf32` precision policy: under fp32-strict they are not
applicable, and the runtime's static check rejects any TF32 switch in an fp32-strict candidate anyway. The
runtime compares tf32 candidates at the tf32 policy's tolerance and labels every result with the policy.
"""

from __future__ import annotations

from htam_graph.model import PrecisionPolicy
from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView, header_line
from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.fused_elementwise import Region
from htam_graph.rules.ops import GEMM_OPS, OpNode
from htam_graph.rules.recipes.elementwise.library_epilogue import KEY as EPILOGUE_KEY
from htam_graph.rules.recipes.elementwise.library_epilogue import LIBRARY_CALL_MARKS, LibraryEpilogue

TF32_MATMUL = "precision.tf32_matmul"
TF32_CONVOLUTION = "precision.tf32_convolution"

_SWITCH = {
    TF32_MATMUL: "torch.backends.cuda.matmul.allow_tf32",  # cuBLAS GEMMs
    TF32_CONVOLUTION: "torch.backends.cudnn.allow_tf32",  # cuDNN convolutions
}


def _is_conv(op: str) -> bool:
    return op.startswith(("conv", "conv_transpose"))


class Tf32Library(PlannedRecipe[tuple[OpNode, Region, str]]):
    """Recipe for `precision.tf32_matmul` (linear / matmul / mm / bmm) or `precision.tf32_convolution`."""

    default_config = LibraryEpilogue.default_config

    def __init__(self, key: str) -> None:
        if key not in _SWITCH:
            raise ValueError(f"no TF32 recipe for {key}")
        self.key = key
        self._epilogue = LibraryEpilogue()

    def plan(self, view: TaskView) -> tuple[OpNode, Region, str]:
        """The library epilogue's plan, under the tf32 policy and for this recipe's library op only."""
        if view.precision_policy is not PrecisionPolicy.TF32:
            raise NotApplicable(
                f"{self.key} changes precision: it applies only under the tf32 precision policy, "
                f"and this run's policy is {view.precision_policy.value}"
            )
        op = view.graph.nodes[0].op if view.graph.nodes else ""
        wanted = op in GEMM_OPS if self.key == TF32_MATMUL else _is_conv(op)
        if not wanted:
            family = "a matmul / linear" if self.key == TF32_MATMUL else "a convolution"
            raise NotApplicable(f"the forward does not start with {family} library op")
        try:  # the same kernel: a custom epilogue must exist to launch
            return self._epilogue.plan(view)
        except NotApplicable as e:
            raise NotApplicable(f"{EPILOGUE_KEY}: {e}") from e

    def render(self, view: TaskView, plan: tuple[OpNode, Region, str], config: KernelConfig) -> str:
        return self._with_tf32(self._epilogue.render(view, plan, config), config)

    def _with_tf32(self, source: str, config: KernelConfig) -> str:
        """The epilogue file with its library call wrapped in the TF32 scope (and named as this recipe)."""
        lines = source.split("\n")
        marked = [i for i, line in enumerate(lines) if line.rstrip().endswith(LIBRARY_CALL_MARKS)]
        if len(marked) != 1 or not lines[0].startswith("# htam-rules: "):
            raise NotApplicable(f"{EPILOGUE_KEY} wrote no single marked library call to run under TF32")
        i = marked[0]
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        lines[i] = (
            f"{indent}with {_scope_name(self.key)}():  # TF32 for this library call only\n    {lines[i]}"
        )
        lines[0] = header_line(self.key, config)
        text = "\n".join(lines)
        text = text.replace(
            f"strategy {EPILOGUE_KEY}.",
            f"strategy {self.key}.\n# PRECISION POLICY tf32: the library call runs on TF32 tensor "
            "cores (about 10 "
            "mantissa bits); results are checked at the tf32 tolerance and reported on the tf32 track only.",
            1,
        )
        return text.replace("\nclass ModelNew(", f"\n{_scope_source(self.key)}\n\n\nclass ModelNew(", 1)


def _scope_name(key: str) -> str:
    return "Tf32MatmulScope" if key == TF32_MATMUL else "Tf32ConvolutionScope"


# A plain class, not contextlib: the runtime's static check allows only a few standard modules.
_SCOPE = '''\
class $name:
    """`with $name():` enables TF32 ($switch) inside the block only.

    Scoped on purpose: the previous setting is restored on exit, because a global switch would also speed up
    (and change) the reference and every later call in the process.
    """

    def __enter__(self) -> None:
        self.previous = $switch
        $switch = True

    def __exit__(self, *exc_info: object) -> None:
        $switch = self.previous'''


def _scope_source(key: str) -> str:
    return template.fill(_SCOPE, name=_scope_name(key), switch=_SWITCH[key])


def tf32_recipes() -> list[Tf32Library]:
    """The TF32 recipes (registered after the base and tuning recipes)."""
    return [Tf32Library(TF32_MATMUL), Tf32Library(TF32_CONVOLUTION)]
