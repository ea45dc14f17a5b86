"""fusion.pointwise_into_reduction: a loss / mean / sum over every element in one pass over the inputs.

Stage 1 (`<name>_partials_kernel`): a fixed grid of at most MAX_PARTIALS programs; program p walks tiles
p, p + G, p + 2G, ... of the [rows, cols] view (see recipes/losses/plan.py), loads each operand once,
evaluates the pointwise term in fp32 and accumulates it in a per-lane fp32 tile, then stores one partial sum.
Stage 2 (`<name>_finish_kernel`): one program sums the partials in a fixed tree order and divides once (mean:
by the element count, batchmean: by the size of dim 0). No atomics: the result is the same bits on every run.

Launch configuration (what `parallelism.block_size_tuning` varies): BLOCK elements per tile, NUM_WARPS, and
MAX_PARTIALS = `config.max_single_block // PARTIALS_DIVISOR` (the default 16384 gives 2048 programs). The
partial count is written into the file as a constant, so one kernel file always combines in the same order.
"""

from __future__ import annotations

from collections.abc import Callable

from htam_graph.rules.base import KernelConfig, NotApplicable, PlannedRecipe, TaskView
from htam_graph.rules.codegen import template
from htam_graph.rules.codegen.fused_elementwise import identifier, operand_renderer
from htam_graph.rules.codegen.model_file import SourceParts, forward_expr, render_file
from htam_graph.rules.codegen.triton_math import emit_op, helper_sources
from htam_graph.rules.ops import Const, OpKind, OpNode, Value, number
from htam_graph.rules.recipes.losses.plan import COL, FULL, ONE, ROW, LossPlan, plan_loss

KEY = "fusion.pointwise_into_reduction"
PARTIALS_DIVISOR = 8  # MAX_PARTIALS of a configuration = its max_single_block // PARTIALS_DIVISOR


def max_partials(config: KernelConfig) -> int:
    """The stage-1 program count a configuration is written with (a constant of the generated file; at least
    2, since KernelConfig keeps max_single_block a power of two >= 16)."""
    return config.max_single_block // PARTIALS_DIVISOR


_INDEX = {FULL: "rows * n_cols + cols", COL: "cols", ROW: "rows", ONE: "rows * 0 + cols * 0"}

OPERAND_CHECK_SOURCE = '''\
def check_operand(name: str, t: torch.Tensor, full: tuple[int, ...], split: int, space: str) -> None:
    """Raise unless `t` is read as `space` (full / col / row / one) in the [rows, cols] view of `full`."""
    padded = (1,) * (len(full) - t.dim()) + tuple(t.shape)
    head_full, tail_full = padded[:split] == full[:split], padded[split:] == full[split:]
    head_one = all(s == 1 for s in padded[:split])
    tail_one = all(s == 1 for s in padded[split:])
    ok = {"full": head_full and tail_full, "col": head_one and tail_full, "row": head_full and tail_one}
    if t.dim() > len(full) or not ok.get(space, head_one and tail_one):
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected a {space} operand of {full}")
'''


class PointwiseIntoReduction(PlannedRecipe[LossPlan]):
    """Recipe for `fusion.pointwise_into_reduction`."""

    key = KEY
    default_config = KernelConfig(block=4096, num_warps=8)

    def plan(self, view: TaskView) -> LossPlan:
        return plan_loss(view.graph)

    def probe(self, view: TaskView, plan: LossPlan) -> None:
        _kernel_source(plan, "check", self.default_config)  # inexpressible ops fail here, not at emit

    def render(self, view: TaskView, plan: LossPlan, config: KernelConfig) -> str:
        name = identifier(f"fused_{plan.final.op}", set())
        kernel, helpers = _kernel_source(plan, name, config)
        launcher = _launcher_source(plan, name)
        args = [forward_expr(view.graph, leaf.ref) for leaf in plan.leaves]
        args += [f"float(self.{s.path})" for s in plan.scalars]
        parts = SourceParts(
            recipe_key=self.key,
            config=config,
            task_key=view.task_key,
            summary=(
                f"{plan.describe()} fused into one pass: per-program fp32 partial sums, then one program",
                "sums the partials in a fixed order (deterministic, no atomics) and divides once.",
            ),
            constants=(
                f"BLOCK = {config.block}  # elements per tile (BLOCK_R rows x BLOCK_C columns)",
                f"NUM_WARPS = {config.num_warps}",
                f"MAX_PARTIALS = {max_partials(config)}  # stage-1 programs at most (fixed: same "
                "combine order on any GPU)",
                f"SPLIT = {plan.split}  # the [rows, cols] view splits the shape before this dim",
            ),
            helpers=tuple(helper_sources(set(helpers))),
            kernels=(kernel, _finish_source(name)),
            extra=(OPERAND_CHECK_SOURCE,),
            launchers=(launcher,),
            class_doc=f"{plan.describe()} as a two-stage deterministic Triton reduction.",
            forward_body=(f"return {name}({', '.join(args)})",),
        )
        return render_file(parts, view.skeleton)


# ------------------------------------------------------------------------------------------- stage 1
# Program p sums the pointwise term over tiles p, p + G, ... of the [rows, cols] view into per-lane fp32
# sums, then stores one partial.
_PARTIALS_KERNEL = '''\
@triton.jit
def ${name}_partials_kernel(
    $params
):
    """Stage 1 of $describe: program p sums the pointwise term over tiles p, p + G, ..."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    n_col_tiles = tl.cdiv(n_cols, BLOCK_C)
    acc = tl.zeros([BLOCK_R, BLOCK_C], dtype=tl.float32)  # per-lane fp32 sums
    for tile in range(pid, n_tiles, n_programs):
        rows = (tile // n_col_tiles) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
        cols = (tile % n_col_tiles) * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
        if INDEX_64:  # 2**31 elements or more: 64-bit offsets
            rows = rows.to(tl.int64)
        mask = (rows < n_rows) & (cols < n_cols)
        $loads
        $prologue
        term = $term  # $final ($origin)
        acc += tl.where(mask, term, 0.0)  # masked lanes add nothing (even if the term is inf/nan there)
    tl.store(partial_ptr + pid, tl.sum(tl.sum(acc, axis=1), axis=0))
'''


def _kernel_source(plan: LossPlan, name: str, config: KernelConfig) -> tuple[str, set[str]]:
    variables = {leaf.ref: leaf.arg for leaf in plan.leaves}
    scalar_args = {s.path: s.arg for s in plan.scalars}
    render = operand_renderer(variables, scalar_args)
    params = [f"{leaf.arg}_ptr" for leaf in plan.leaves] + ["partial_ptr", "n_rows", "n_cols", "n_tiles"]
    params += [s.arg for s in plan.scalars]
    params += ["BLOCK_R: tl.constexpr", "BLOCK_C: tl.constexpr", "INDEX_64: tl.constexpr"]
    helpers: set[str] = set()
    prologue = []
    for node in plan.pre:
        emitted = emit_op(node, render)
        helpers |= emitted.helpers
        var = identifier(f"v_{node.name}", set(variables.values()) | set(scalar_args.values()))
        variables[node.name] = var
        prologue.append(f"{var} = {emitted.expr}  # {node.op} ({node.origin})")
    text = template.fill(
        _PARTIALS_KERNEL,
        name=name,
        params=[f"{p}," for p in params],
        describe=plan.describe(),
        loads=[
            f"{leaf.arg} = tl.load({leaf.arg}_ptr + {_INDEX[leaf.space]}, mask=mask, other=0.0)"
            ".to(tl.float32)"
            for leaf in plan.leaves
        ],
        prologue=prologue,
        term=_term(plan.final, render),
        final=plan.final.op,
        origin=plan.final.origin,
    )
    return text, helpers


def _term(final: OpNode, r: Callable[[Value], str]) -> str:
    """The fp32 pointwise term the final node sums (PyTorch's formula for each loss)."""
    a = r(final.operands[0])
    if final.kind is OpKind.TOTAL:
        return a
    b = r(final.operands[1])
    if final.op == "mse_loss":
        return f"({a} - {b}) * ({a} - {b})"
    if final.op == "l1_loss":
        return f"tl.abs({a} - {b})"
    if final.op == "smooth_l1_loss":  # beta == 0 is l1: z < 0 never holds
        beta = r(_number_param(final, "beta"))
        z = f"tl.abs({a} - {b})"
        return f"tl.where({z} < {beta}, 0.5 * {z} * {z} / {beta}, {z} - 0.5 * {beta})"
    if final.op == "huber_loss":
        delta = r(_number_param(final, "delta"))
        z = f"tl.abs({a} - {b})"
        return f"tl.where({z} < {delta}, 0.5 * {z} * {z}, {delta} * ({z} - 0.5 * {delta}))"
    if final.op == "kl_div":
        log_target = final.param("log_target")
        if log_target == Const(True):
            return f"tl.exp({b}) * ({b} - {a})"
        if log_target != Const(False):
            raise NotApplicable(f"kl_div log_target={log_target}")
        # xlogy(target, target) - target * input: 0 where the target is 0, like PyTorch
        return f"tl.where({b} == 0.0, 0.0, {b} * tl.log({b})) - {b} * {a}"
    raise NotApplicable(f"no pointwise rule for {final.op}")


def _number_param(node: OpNode, name: str) -> Value:
    value = node.param(name)
    if number(value) is None:
        raise NotApplicable(f"{node.op}: {name}={value} is not a number")
    return value


# ----------------------------------------------------------------------------------------- stage 2 + launcher
_FINISH_KERNEL = '''\
@triton.jit
def ${name}_finish_kernel(partial_ptr, out_ptr, n_partials, divisor, BLOCK_P: tl.constexpr):
    """Stage 2: one program sums the partials (a fixed tree order) and divides once."""
    offs = tl.arange(0, BLOCK_P)
    partials = tl.load(partial_ptr + offs, mask=offs < n_partials, other=0.0)
    total = tl.sum(partials, axis=0)
    tl.store(out_ptr, (total / divisor).to(out_ptr.dtype.element_ty))
'''


def _finish_source(name: str) -> str:
    return template.fill(_FINISH_KERNEL, name=name)


# The launcher: operand checks against the broadcast shape, the [rows, cols] tiles, stage 1 then stage 2.
_LAUNCHER = '''\
def $name($signature) -> torch.Tensor:
    """$describe of the operands as a 0-d tensor (sizes read at run time)."""
    full = tuple(torch.broadcast_shapes($shapes))
    if len(full) != $rank:
        raise ValueError(f"expected a $rank-d broadcast shape, got {full}")
    $operands
    n_rows, n_cols = math.prod(full[:SPLIT]), math.prod(full[SPLIT:])
    block_c = min(triton.next_power_of_2(max(n_cols, 1)), BLOCK)
    block_r = BLOCK // block_c
    n_tiles = triton.cdiv(n_rows, block_r) * triton.cdiv(n_cols, block_c)
    n_partials = max(1, min(n_tiles, MAX_PARTIALS))
    partials = torch.empty(n_partials, device=$first.device, dtype=torch.float32)
    out = torch.empty((), device=$first.device, dtype=$first.dtype)
    ${name}_partials_kernel[(n_partials,)](
        $args,
        BLOCK_R=block_r,
        BLOCK_C=block_c,
        INDEX_64=n_rows * n_cols + BLOCK > 2**31 - 1,
        num_warps=NUM_WARPS,
    )
    ${name}_finish_kernel[(1,)](
        partials, out, n_partials, $divisor, BLOCK_P=triton.next_power_of_2(n_partials), num_warps=4
    )
    return out
'''


def _launcher_source(plan: LossPlan, name: str) -> str:
    tensors = [leaf.arg for leaf in plan.leaves]
    scalars = [s.arg for s in plan.scalars]
    return template.fill(
        _LAUNCHER,
        name=name,
        signature=", ".join([f"{t}: torch.Tensor" for t in tensors] + [f"{s}: float" for s in scalars]),
        describe=plan.describe(),
        shapes=", ".join(t + ".shape" for t in tensors),
        rank=plan.full_rank,
        operands=[
            line
            for leaf in plan.leaves
            for line in (
                f'check_operand("{leaf.arg}", {leaf.arg}, full, SPLIT, "{leaf.space}")',
                f"{leaf.arg} = {leaf.arg}.contiguous()",
            )
        ],
        first=tensors[0],
        args=", ".join([*tensors, "partials", "n_rows", "n_cols", "n_tiles", *scalars]),
        divisor={"one": "1.0", "numel": "float(n_rows * n_cols)", "rows0": "float(full[0])"}[plan.divisor],
    )
