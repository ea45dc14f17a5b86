"""Tuning recipes: re-emit the current best rules kernel with another launch configuration.

`parallelism.block_size_tuning` varies BLOCK / num_warps (and, for row kernels, the register-row limit);
`memory_access.vectorized_loads` adds contiguity hints and picks configurations with 4-16 contiguous fp32
elements per thread (128-bit accesses or more). The base kernel is read from the `# htam-rules:` header of the
request's base source; when the base was not written by a recipe, the first base recipe that applies is used.
Which configuration of the ladder comes next is the autotuner's choice (`htam_graph.rules.autotune`): the
first one not yet measured for (task, shape, GPU); the ladders are ordered by how likely each is to win.
"""

from __future__ import annotations

from htam_graph.rules.base import Applicability, KernelConfig, NotApplicable, Recipe, TaskView, parse_header

BLOCK_SIZE_TUNING = "parallelism.block_size_tuning"
VECTORIZED_LOADS = "memory_access.vectorized_loads"

_ELEMENTWISE_BASES = ("fusion.elementwise_chain", "fusion.library_epilogue")
_ROW_BASES = ("reduction_structure.row_softmax",)
_POOL_BASES = ("data_reuse.pooling_window_reuse",)  # pooled outputs per program, each looping over its window
_SCALE_BASES = ("algebraic_rewrite.diag_matmul_as_broadcast",)  # columns per program
_NOOP_BASES = ("algebraic_rewrite.drop_noops",)  # re-emits an elementwise / epilogue / pooling kernel

ELEMENTWISE_LADDER = tuple(
    KernelConfig(block=b, num_warps=w)
    for b, w in ((1024, 4), (2048, 8), (4096, 8), (512, 4), (2048, 4), (256, 2), (8192, 16))
)
ROW_LADDER = tuple(
    KernelConfig(block=b, num_warps=w, max_single_block=m)
    for b, w, m in (
        (2048, 8, 16384),
        (4096, 8, 16384),
        (4096, 16, 16384),
        (1024, 4, 16384),
        (8192, 16, 16384),
        (2048, 8, 8192),
        (4096, 16, 32768),
    )
)
# Pooling (recipes/pooling/codegen.py): BLOCK = outputs per program, consecutive along W (several rows per
# program only when a row is shorter than BLOCK).
POOL_LADDER = tuple(
    KernelConfig(block=b, num_warps=w)
    for b, w in ((1024, 4), (512, 4), (2048, 8), (1024, 8), (256, 4), (2048, 4))
)
# Tiled reductions / norms: BLOCK = elements per [BLOCK_R, BLOCK_I] tile, max_single_block // 16 = the program
# count below which long reductions are split across programs (see recipes/reduce/kernel.py).
_REDUCE_BASES = (
    "reduction_structure.single_pass_norm",
    "reduction_structure.dim_reduction",
    "reduction_structure.online_logsumexp",
)
REDUCE_LADDER = tuple(
    KernelConfig(block=b, num_warps=w, max_single_block=m)
    for b, w, m in (
        (2048, 8, 16384),
        (4096, 8, 16384),
        (1024, 4, 16384),
        (4096, 16, 32768),
        (2048, 4, 8192),
        (8192, 16, 16384),
        (1024, 8, 4096),
    )
)
# Channel-tile kernels (recipes/conv_reduce/codegen.py): BLOCK = C_PAD * BLOCK_S, max_single_block // 16 = the
# program count below which narrower tiles / fewer tiles per program are used.
_CONV_REDUCE_BASES = ("fusion.conv_reduction_epilogue",)
# Direct depthwise conv (recipes/depthwise/codegen.py): BLOCK = output elements per [BLOCK_H, BLOCK_W] tile.
_DEPTHWISE_BASES = ("data_reuse.depthwise_conv_direct",)
DEPTHWISE_LADDER = tuple(
    KernelConfig(block=b, num_warps=w)
    for b, w in ((1024, 4), (2048, 8), (512, 4), (2048, 4), (4096, 8), (1024, 8))
)
# Whole-tensor losses and sums (recipes/losses/recipe.py): BLOCK = elements per tile, max_single_block // 8 =
# the stage-1 program count (default 2048): more or fewer programs walking the grid-stride loop.
_LOSS_BASES = ("fusion.pointwise_into_reduction",)
LOSS_LADDER = tuple(
    KernelConfig(block=b, num_warps=w, max_single_block=m)
    for b, w, m in (
        (8192, 8, 16384),
        (4096, 8, 8192),
        (4096, 8, 32768),
        (8192, 16, 32768),
        (2048, 4, 16384),
        (16384, 16, 16384),
    )
)
# Composed kernels (rules/compose/): BLOCK = elements per program (elementwise) or per [BLOCK_R, BLOCK_K] tile
_COMPOSED_BASES = ("fusion.composed_kernels",)
COMPOSED_LADDER = tuple(
    KernelConfig(block=b, num_warps=w) for b, w in ((4096, 4), (2048, 4), (4096, 8), (8192, 8), (1024, 4))
)
VECTOR_LADDER = tuple(
    KernelConfig(block=b, num_warps=w, vector_hints=True)
    for b, w in ((1024, 4), (2048, 4), (4096, 8), (4096, 4), (2048, 2))
)


class TuningRecipe:
    """A recipe that re-emits a base recipe's kernel with another configuration from a ladder."""

    def __init__(
        self, key: str, ladders: dict[str, tuple[KernelConfig, ...]], bases: dict[str, Recipe]
    ) -> None:
        self.key = key
        self._ladders = ladders
        self._bases = {k: bases[k] for k in ladders if k in bases}
        self.default_config = KernelConfig()

    @property
    def ladders(self) -> dict[str, tuple[KernelConfig, ...]]:
        """The configurations explored per base recipe key (read by `htam_graph.rules.autotune`)."""
        return dict(self._ladders)

    def check(self, view: TaskView) -> Applicability:
        reasons = []
        for base in self._bases.values():
            verdict = base.check(view)
            if verdict:
                return Applicability.yes()
            reasons.append(f"{base.key}: {verdict.reason}")
        return Applicability.no("no kernel to tune (" + "; ".join(reasons) + ")")

    def base_for(self, view: TaskView, base_source: str) -> tuple[Recipe, KernelConfig]:
        """The base recipe whose kernel is re-emitted, and the configuration it currently has.

        The `# htam-rules:` header of the base source names them; a base not written by a tuned recipe falls
        back to the first base recipe that applies, at its default configuration. Raises NotApplicable.
        """
        header = parse_header(base_source)
        if header is not None and header.recipe in self._bases and self._bases[header.recipe].check(view):
            return self._bases[header.recipe], header.config
        base = next((b for b in self._bases.values() if b.check(view)), None)
        if base is None:
            raise NotApplicable(self.check(view).reason)
        return base, base.default_config

    def emit(self, view: TaskView, config: KernelConfig) -> str:
        """Tuning needs the base source; the generator uses `base_for` and the base recipe."""
        raise NotApplicable(f"{self.key} re-emits a base kernel: call base_for() with the base source")


def tuning_recipes(bases: dict[str, Recipe]) -> list[TuningRecipe]:
    """The tuning recipes over the given base recipes."""
    block_ladders = {k: ELEMENTWISE_LADDER for k in _ELEMENTWISE_BASES} | {k: ROW_LADDER for k in _ROW_BASES}
    block_ladders |= {k: POOL_LADDER for k in _POOL_BASES} | {k: ELEMENTWISE_LADDER for k in _SCALE_BASES}
    block_ladders |= {k: ELEMENTWISE_LADDER for k in _NOOP_BASES}
    block_ladders |= {k: REDUCE_LADDER for k in _REDUCE_BASES}
    block_ladders |= {k: REDUCE_LADDER for k in _CONV_REDUCE_BASES}
    block_ladders |= {k: DEPTHWISE_LADDER for k in _DEPTHWISE_BASES}
    block_ladders |= {k: LOSS_LADDER for k in _LOSS_BASES}
    block_ladders |= {k: COMPOSED_LADDER for k in _COMPOSED_BASES}
    vector_ladders = {k: VECTOR_LADDER for k in _ELEMENTWISE_BASES + _NOOP_BASES}
    return [
        TuningRecipe(BLOCK_SIZE_TUNING, block_ladders, bases),
        TuningRecipe(VECTORIZED_LOADS, vector_ladders, bases),
    ]
