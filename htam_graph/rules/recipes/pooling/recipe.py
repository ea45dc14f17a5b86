"""data_reuse.pooling_window_reuse: max / avg pooling (1D, 2D, 3D) as one Triton kernel, with what surrounds
it.

Applies to a forward of the form  [library op] -> elementwise prologue -> nn.MaxPoolNd / nn.AvgPoolNd ->
elementwise epilogue  (each part optional except the pool): KernelBench's plain pooling tasks and the level2
`Conv..._AvgPool` / `..._MaxPool` chains. The library op (conv, conv_transpose, linear) stays the same module
call as in Model, so the weights are the same objects; the prologue, the pooling window loop and the epilogue
are ONE kernel (see `codegen.py`, and `launch.py` for its launcher), so the conv output is read once and only
the pooled tensor is written.

Window parameters (kernel_size, stride, padding, dilation, ceil_mode, count_include_pad, divisor_override) are
read from the pooling module at run time, so the file serves any configuration of the same module type.
"""

from __future__ import annotations

import dataclasses

from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen.fused_elementwise import (
    BROADCAST_LAYOUT_SOURCE,
    Leaf,
    Region,
    Scalar,
    build_region,
    forward_leaf_exprs,
    identifier,
)
from htam_graph.rules.codegen.model_file import SourceParts, render_file
from htam_graph.rules.codegen.triton_math import helper_sources
from htam_graph.rules.ops import Const, OpGraph, OpKind, OpNode, Ref
from htam_graph.rules.recipes.elementwise.library_epilogue import _library_call
from htam_graph.rules.recipes.pooling.codegen import POOL_HELPERS_SOURCE, PoolCode, pool_kernel_source
from htam_graph.rules.recipes.pooling.launch import pool_constants, pool_launcher_source

KEY = "data_reuse.pooling_window_reuse"
_FLOAT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16")
# Names the launcher and kernel use for themselves: a tensor argument must not shadow them.
_LAUNCHER_NAMES = frozenset(
    "out n_out pool nd kernel stride padding dilation ceil_mode in_sizes out_sizes pool_shape out_shape grid"
    " pad3 in3 out3 k3 s3 p3 d3 src acc pooled count valid plane rest offs mask pid ow oh od d0 h0 w0 d1 h1"
    " w1 di hi wi kd kh kw d_in dh_in tl triton torch nn math n_rows block_w rows n_w_blocks w_block_first"
    " pid_row row row_ok out_ok row_in in_row out_row MAX_GRID_AXIS1 INT32_MAX".split()
)


@dataclasses.dataclass(frozen=True)
class PoolPlan:
    """The parts of the forward: the optional library op, and the fused pooling code."""

    library: OpNode | None
    library_var: str
    pool: OpNode
    code: PoolCode


class PoolWindow(PlannedRecipe[PoolPlan]):
    """Recipe for `data_reuse.pooling_window_reuse`."""

    key = KEY
    default_config = KernelConfig(block=1024, num_warps=4)  # outputs per program (along W first)

    def render(self, view: TaskView, plan: PoolPlan, config: KernelConfig) -> str:
        code, pool = plan.code, plan.pool
        fused = code.pre is not None or code.post is not None
        stem = f"{pool.op}_fused" if fused else pool.op
        kernel_name, launcher_name = f"{stem}_kernel", stem
        kernel, helpers = pool_kernel_source(code, kernel_name)
        broadcast = any(leaf.broadcast for leaf in code.tensor_leaves())
        args = [leaf.expr for leaf in code.tensor_leaves()] + [s.expr for s in code.scalars]
        args.append(f"self.{pool.module_path}")
        body: list[str] = []
        if plan.library is not None:
            body.append(
                f"{plan.library_var} = {_library_call(view.graph, plan.library)}  # library op, unchanged"
            )
        body.append(f"return {launcher_name}({', '.join(args)})")
        parts = SourceParts(
            recipe_key=KEY,
            config=config,
            task_key=view.task_key,
            summary=tuple(_summary(plan)),
            constants=tuple(pool_constants(kernel_name, config)),
            helpers=tuple(helper_sources(set(helpers))),
            kernels=(kernel,),
            extra=(POOL_HELPERS_SOURCE, *((BROADCAST_LAYOUT_SOURCE,) if broadcast else ())),
            launchers=(pool_launcher_source(code, launcher_name, kernel_name),),
            class_doc=f"{_describe(plan)}: the pooling and the elementwise ops around it in one "
            "Triton kernel.",
            forward_body=tuple(body),
        )
        return render_file(parts, view.skeleton)

    def plan(self, view: TaskView) -> PoolPlan:
        """Split the forward into library op / prologue / pool / epilogue. Raises NotApplicable."""
        graph = view.graph
        nodes = graph.nodes
        pools = [i for i, n in enumerate(nodes) if n.kind is OpKind.POOL]
        if not pools:
            raise NotApplicable("the forward has no max/avg pooling op")
        if len(pools) > 1:
            raise NotApplicable(f"the forward has {len(pools)} pooling ops (one pool per kernel)")
        index = pools[0]
        pool = nodes[index]
        _check_pool(graph, pool)
        library: OpNode | None = None
        start = 0
        if nodes[0].kind is OpKind.LIBRARY:
            library, start = nodes[0], 1
            for operand in library.operands:
                if isinstance(operand, Ref) and graph.tensor(operand.name) is None:
                    raise NotApplicable(f"{library.op} reads a computed tensor {operand.name}")
        pre, post = nodes[start:index], nodes[index + 1 :]
        for node in (*pre, *post):
            if node.kind is not OpKind.ELEMENTWISE:
                raise NotApplicable(f"{node.op} ({node.origin}) is neither elementwise nor the pool")
        leaf_exprs = forward_leaf_exprs(graph)
        library_var = ""
        if library is not None:
            library_var = "y" if "y" not in leaf_exprs else f"{library.name}_out"
            if any(u is not pool and u not in pre for u in graph.users(library.name)):
                raise NotApplicable(f"{library.op}'s output is used after the pool")
        pre_region, source = _prologue(graph, pool, pre, leaf_exprs, library, library_var)
        post_region = _epilogue(graph, pool, post, leaf_exprs)
        code = _unique_names(pool, source, pre_region, post_region)
        pool_kernel_source(code, "probe_kernel")  # fail here, not at emit time, on ops the rules cannot write
        return PoolPlan(library, library_var, pool, code)


def _check_pool(graph: OpGraph, pool: OpNode) -> None:
    if pool.op.startswith("adaptive"):
        raise NotApplicable(f"{pool.op}: its windows depend on the input's size (kept as the PyTorch call)")
    if pool.module_path is None:
        raise NotApplicable(
            f"functional {pool.op}: the recipe reads the window from an nn.*Pool module at run time"
        )
    params = dict(pool.params)
    if params.get("return_indices", Const(False)) != Const(False):
        raise NotApplicable(f"{pool.op} returns indices")
    nd = int(pool.op[-2])
    source = pool.operands[0]
    if not isinstance(source, Ref):
        raise NotApplicable(f"{pool.op} does not read a tensor")
    shape = graph.shape_of(source.name)
    if len(shape) != nd + 2:
        raise NotApplicable(f"{pool.op} on a {len(shape)}-d input (only batched N, C, spatial inputs)")


def _prologue(
    graph: OpGraph,
    pool: OpNode,
    pre: tuple[OpNode, ...],
    leaf_exprs: dict[str, str],
    library: OpNode | None,
    library_var: str,
) -> tuple[Region | None, Leaf]:
    exprs = dict(leaf_exprs)
    if library is not None:
        exprs[library.name] = library_var
    source = pool.operands[0]
    assert isinstance(source, Ref)
    if not pre:
        if source.name not in exprs:
            raise NotApplicable(f"{pool.op} reads {source.name}, which is computed outside the kernel")
        dtype = _dtype(graph, source.name)
        if dtype not in _FLOAT_DTYPES:
            raise NotApplicable(f"{pool.op} input has dtype {dtype}")
        return None, Leaf(source.name, identifier(source.name, set()), exprs[source.name], False)
    if source.name != pre[-1].name:
        raise NotApplicable(f"{pool.op} does not read the result of the elementwise ops before it")
    if [u.name for u in graph.users(pre[-1].name)] != [pool.name]:
        raise NotApplicable(f"{pre[-1].name} is used other than by the pool")
    region = build_region(dataclasses.replace(graph, output=Ref(pre[-1].name)), pre, exprs)
    if library is not None and not any(leaf.ref == library.name for leaf in region.leaves):
        raise NotApplicable(f"the ops before the pool do not read {library.op}'s output")
    main = next(leaf for leaf in region.leaves if not leaf.broadcast)
    return region, main


def _epilogue(
    graph: OpGraph, pool: OpNode, post: tuple[OpNode, ...], leaf_exprs: dict[str, str]
) -> Region | None:
    if not post:
        if graph.output.name != pool.name:
            raise NotApplicable(f"the forward does not return the pooled tensor of {pool.op}")
        return None
    region = build_region(graph, post, {**leaf_exprs, pool.name: "pooled"})
    pooled = next((leaf for leaf in region.leaves if leaf.ref == pool.name), None)
    if pooled is None or pooled.broadcast:
        raise NotApplicable(f"the ops after {pool.op} do not read the pooled tensor at its shape")
    return region


def _unique_names(pool: OpNode, source: Leaf, pre: Region | None, post: Region | None) -> PoolCode:
    """One kernel argument per tensor and scalar, with names that shadow nothing in the launcher."""
    taken: set[str] = set(_LAUNCHER_NAMES)
    renamed: dict[str, str] = {}

    def fresh(leaf: Leaf) -> Leaf:
        if leaf.ref not in renamed:
            renamed[leaf.ref] = identifier(leaf.arg, taken)
        return dataclasses.replace(leaf, arg=renamed[leaf.ref])

    source = fresh(source)
    if pre is not None:
        pre = dataclasses.replace(pre, leaves=tuple(fresh(leaf) for leaf in pre.leaves))
        source = next(leaf for leaf in pre.leaves if leaf.ref == source.ref)
    if post is not None:
        post = dataclasses.replace(
            post, leaves=tuple(leaf if leaf.ref == pool.name else fresh(leaf) for leaf in post.leaves)
        )
        if pre is not None and {leaf.ref for leaf in pre.leaves} & {
            leaf.ref for leaf in post.leaves if leaf.ref != pool.name
        }:
            raise NotApplicable("a tensor is read both before and after the pool")
    scalars: dict[str, Scalar] = {}
    for region in (pre, post):
        for scalar in region.scalars if region is not None else ():
            if scalar.path not in scalars:
                scalars[scalar.path] = dataclasses.replace(scalar, arg=identifier(scalar.arg, taken))
    code = PoolCode(pool.op, int(pool.op[-2]), source, pre, post, pool.name, tuple(scalars.values()))
    return code


def _dtype(graph: OpGraph, name: str) -> str:
    info = graph.tensor(name)
    if info is not None:
        return info.dtype
    node = graph.node(name)
    return node.dtype if node is not None else ""


def _describe(plan: PoolPlan) -> str:
    parts = [plan.library.op] if plan.library is not None else []
    if plan.code.pre is not None:
        parts.append(plan.code.pre.describe())
    parts.append(plan.pool.op)
    if plan.code.post is not None:
        parts.append(plan.code.post.describe())
    return " -> ".join(parts)


def _summary(plan: PoolPlan) -> list[str]:
    lines = []
    if plan.library is not None:
        lines.append(f"{plan.library.op} stays a library call ({plan.library.origin});")
    fused = [p.describe() for p in (plan.code.pre, plan.code.post) if p is not None]
    lines.append(
        f"{plan.pool.op} ({plan.pool.origin}) is one Triton kernel, a window loop per output in fp32"
        + (f", fused with {' and '.join(fused)}." if fused else ".")
    )
    return lines
