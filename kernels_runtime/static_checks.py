"""AST checks on a candidate's source, run before any of it executes.

These are guard-rails against the known reward-hacking patterns (evaluation.md pitfalls 5, 6, 7, 15), not a
sandbox: Python code in the worker can always reach what the worker can reach. What they catch is what an LLM
writes when it "optimises" the measurement instead of the kernel: calling the reference, a torch fallback in an
`except`, threads, timer or torch monkey-patching, precision downgrades, and "kernels" that contain no kernel.
The runtime checks (launch counters, identity snapshots, tolerances) back each of them up.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from htam_graph.model import Language, PrecisionPolicy

__all__ = ["StaticReport", "analyse", "dotted_name", "ALLOWED_IMPORTS"]

# Top-level modules a candidate may import. An allowlist (not a denylist) so that importing the task module,
# `gc` (object graph walks to find the reference), `ctypes`, `threading` & co are all rejected the same way.
ALLOWED_IMPORTS = frozenset(
    {
        "__future__", "torch", "triton", "math", "typing", "typing_extensions", "functools", "itertools",
        "operator", "collections", "dataclasses", "enum", "numbers", "abc", "warnings", "os", "sys", "numpy",
        "einops",
    }
)  # fmt: skip
_CONCURRENCY = frozenset({"threading", "_thread", "multiprocessing", "concurrent", "asyncio", "subprocess"})
_FORBIDDEN_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "open", "globals", "vars"})
_PATCHING_BUILTINS = frozenset({"setattr", "delattr"})  # flagged when aimed at an imported module
_FORBIDDEN_ATTR_CALLS = {
    "os": {"system", "fork", "kill", "killpg", "_exit", "popen", "execv", "execve", "spawnv", "posix_spawn"},
    "sys": {"_getframe", "settrace", "setprofile", "exit"},
}
_FORBIDDEN_ATTRS = {"sys": {"modules", "_getframe"}}
# Introspection dunders: the routes to patching or finding objects without naming them.
_FORBIDDEN_DUNDERS = frozenset(
    {"__dict__", "__setattr__", "__delattr__", "__subclasses__", "__globals__", "__builtins__", "__code__",
     "__closure__", "__bases__", "__mro__", "__getattribute__", "__self__", "__func__"}
)  # fmt: skip
# Side streams (pitfall 4): work queued where the caller's stream does not wait for it.
_SIDE_STREAM = frozenset({"Stream", "stream", "set_stream", "ExternalStream", "StreamContext"})
# torch attributes a candidate may assign: performance knobs that do not change numerics.
_ASSIGNABLE_TORCH = frozenset({"torch.backends.cudnn.benchmark"})
_TF32_ASSIGN = (
    "allow_tf32",
    "allow_fp16_reduced_precision_reduction",
    "allow_bf16_reduced_precision_reduction",
)
_LOW_PRECISION_METHODS = frozenset({"half", "bfloat16"})
_LOW_PRECISION_DTYPES = frozenset({"float16", "half", "bfloat16"})
_AUTOCAST = frozenset({"autocast"})
_CUDA_LOW_PRECISION = ("__half", "__nv_bfloat16", "__float2half", "__float2bfloat16", "half2")
_CUDA_TF32 = ("precision::tf32", "wmma::precision", ".tf32", "CUBLAS_TF32", "CUBLAS_TENSOR_OP_MATH")
_IEEE_DOT = frozenset({"ieee", "tf32x3"})  # tl.dot precisions that keep fp32 accuracy


def _dot_precision_message(prec: ast.expr | None) -> str:
    """Why a `tl.dot` breaks fp32-strict, in the words the candidate's author needs to fix it."""
    fix = "pass input_precision='ieee', or 'tf32x3' (Triton's error-compensated 3xTF32), under fp32-strict"
    if prec is None:
        return f"tl.dot on fp32 defaults to TF32; {fix} (pitfall 7)"
    if isinstance(prec, ast.Constant):
        return (
            f"tl.dot with input_precision={prec.value!r} rounds its inputs to TF32, also when hi/lo parts are"
            f" summed by hand (the runtime cannot check such a split); {fix} (pitfall 7)"
        )
    return f"tl.dot's input_precision must be the literal 'ieee' or 'tf32x3'; {fix} (pitfall 7)"


_CPP_EXTENSION_FUNCS = frozenset({"load_inline", "load"})


@dataclass
class StaticReport:
    """What the AST says about a candidate. `violations` are hack_detected reasons (empty: clean)."""

    syntax_error: str | None = None
    defines_model_new: bool = False
    has_triton_kernel: bool = False
    has_cuda_kernel: bool = False  # a `__global__` string in a module that calls load_inline/load
    needs_cuda_build: bool = False  # uses torch.utils.cpp_extension (cannot run on the CPU)
    violations: list[str] = field(default_factory=list)

    @property
    def language(self) -> Language | None:
        """The kernel language detected from the source (Triton wins when both appear)."""
        if self.has_triton_kernel:
            return Language.TRITON
        if self.has_cuda_kernel or self.needs_cuda_build:
            return Language.CUDA
        return None


def dotted_name(node: ast.AST) -> str | None:
    """`a.b.c` for an Attribute/Name chain, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    if isinstance(node, ast.Call):  # e.g. torch.cuda.Event().elapsed_time
        inner = dotted_name(node.func)
        return None if inner is None else inner + "()." + ".".join(reversed(parts))
    return None


class _Aliases:
    """Maps local names to the module paths they were imported as (`F` -> torch.nn.functional)."""

    def __init__(self, tree: ast.Module) -> None:
        self.names: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.names[a.asname or a.name.split(".")[0]] = (
                        a.name if a.asname else a.name.split(".")[0]
                    )
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    self.names[a.asname or a.name] = f"{node.module}.{a.name}"

    def resolve(self, dotted: str | None) -> str | None:
        """Full module path of a dotted expression whose root is an imported name, else None."""
        if dotted is None:
            return None
        root, _, rest = dotted.partition(".")
        base = self.names.get(root)
        if base is None:
            return None
        return f"{base}.{rest}" if rest else base


def _strings(tree: ast.Module) -> list[str]:
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


class _Visitor(ast.NodeVisitor):
    def __init__(self, aliases: _Aliases, policy: PrecisionPolicy, report: StaticReport) -> None:
        self.al = aliases
        self.policy = policy
        self.report = report
        self.in_reference_class = False
        self.in_call_func = False

    def flag(self, node: ast.AST, why: str) -> None:
        self.report.violations.append(f"line {getattr(node, 'lineno', '?')}: {why}")

    # ---------------------------------------------------------------- imports
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_module(node, a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag(node, "relative import (the candidate must be self-contained)")
        elif node.module:
            self._check_module(node, node.module)

    def _check_module(self, node: ast.AST, module: str) -> None:
        top = module.split(".")[0]
        if top in _CONCURRENCY:
            self.flag(node, f"imports {module}: threads/processes/async work escape the timer (pitfall 5)")
        elif top not in ALLOWED_IMPORTS:
            self.flag(node, f"imports {module}: not an allowed module ({', '.join(sorted(ALLOWED_IMPORTS))})")

    # ---------------------------------------------------------------- classes and names
    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name == "Model":  # a pasted copy of the reference; using it elsewhere is flagged
            saved, self.in_reference_class = self.in_reference_class, True
            self.generic_visit(node)
            self.in_reference_class = saved
            return
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "Model" and isinstance(node.ctx, ast.Load) and not self.in_reference_class:
            self.flag(node, "uses the reference `Model` (the candidate must compute the result itself)")
        if node.id == "__builtins__":
            self.flag(node, "touches __builtins__")
        if node.id in _PATCHING_BUILTINS and isinstance(node.ctx, ast.Load) and not self.in_call_func:
            self.flag(node, f"passes {node.id} around as a value (indirect patching)")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _FORBIDDEN_DUNDERS:
            self.flag(node, f"uses .{node.attr} (introspection that can patch or find harness objects)")
        full = self.al.resolve(dotted_name(node))
        if full is not None and full.startswith("torch.cuda.") and full.split(".")[2] in _SIDE_STREAM:
            self.flag(node, f"uses {full}: work on a side stream escapes the caller's stream (pitfall 4)")
        if full is not None:
            root, _, last = full.rpartition(".")
            if last in _FORBIDDEN_ATTRS.get(root, ()):
                self.flag(node, f"uses {full}")
            if self.policy is PrecisionPolicy.FP32_STRICT or self.policy is PrecisionPolicy.TF32:
                if last in _LOW_PRECISION_DTYPES and root in {"torch", "triton.language", "tl"}:
                    self.flag(node, f"uses {full} under the {self.policy.value} policy (pitfall 7)")
        self.generic_visit(node)

    # ---------------------------------------------------------------- assignments (monkey-patching)
    def _check_target(self, target: ast.AST, value: ast.AST | None) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for elt in target.elts:
                self._check_target(elt, None)
            return
        if not isinstance(target, ast.Attribute):
            return
        full = self.al.resolve(dotted_name(target))
        if full is None:
            return
        if full.endswith(_TF32_ASSIGN):
            if self.policy is PrecisionPolicy.FP32_STRICT:
                self.flag(target, f"sets {full} under fp32-strict (TF32 is a separate track, pitfall 7)")
            return
        if full in _ASSIGNABLE_TORCH or full.startswith("os.environ"):
            return
        self.flag(
            target,
            f"assigns {full}: patching an imported module (timers, torch ops) is not allowed (pitfall 6)",
        )

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            self._check_target(t, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target, node.value)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._check_target(t, None)
        self.generic_visit(node)

    # ---------------------------------------------------------------- calls
    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in {"getattr", "hasattr"} and len(node.args) >= 2:
            target = self.al.resolve(dotted_name(node.args[0]))
            if target is not None and not isinstance(node.args[1], ast.Constant):
                self.flag(node, f"{node.func.id}() on {target} with a computed name")
        if isinstance(node.func, ast.Name):
            self.in_call_func = True
            self.visit(node.func)
            self.in_call_func = False
            for child in [*node.args, *node.keywords]:
                self.visit(child)
            self._check_call(node)
            return
        self._check_call(node)
        self.generic_visit(node)

    def _check_call(self, node: ast.Call) -> None:
        dotted = dotted_name(node.func)
        if isinstance(node.func, ast.Name) and node.func.id in _FORBIDDEN_BUILTINS:
            self.flag(node, f"calls {node.func.id}()")
        if isinstance(node.func, ast.Name) and node.func.id in _PATCHING_BUILTINS and node.args:
            target = self.al.resolve(dotted_name(node.args[0]))
            if target is not None:
                self.flag(node, f"{node.func.id}() on {target}: patching an imported module (pitfall 6)")
        full = self.al.resolve(dotted)
        if full is not None:
            root, _, last = full.rpartition(".")
            if last in _FORBIDDEN_ATTR_CALLS.get(root, ()):
                self.flag(node, f"calls {full}")
            if last in _CPP_EXTENSION_FUNCS and "cpp_extension" in full:
                self.report.needs_cuda_build = True
            self._check_precision_call(node, full, last)
        if isinstance(node.func, ast.Attribute) and node.func.attr in _LOW_PRECISION_METHODS:
            if self.policy is not PrecisionPolicy.BF16:
                self.flag(node, f".{node.func.attr}() under the {self.policy.value} policy (pitfall 7)")

    def _check_precision_call(self, node: ast.Call, full: str, last: str) -> None:
        if last in _AUTOCAST and self.policy is not PrecisionPolicy.BF16:
            self.flag(node, f"{full} under the {self.policy.value} policy (pitfall 7)")
        if last == "set_float32_matmul_precision" and self.policy is PrecisionPolicy.FP32_STRICT:
            args = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if args != ["highest"]:
                self.flag(node, "set_float32_matmul_precision below 'highest' under fp32-strict (pitfall 7)")
        if (
            last == "dot"
            and full.startswith("triton.language")
            and self.policy is PrecisionPolicy.FP32_STRICT
        ):
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            prec = kw.get("input_precision")
            allow = kw.get("allow_tf32")
            ok = (isinstance(prec, ast.Constant) and prec.value in _IEEE_DOT) or (
                isinstance(allow, ast.Constant) and allow.value is False
            )
            if not ok:
                self.flag(node, _dot_precision_message(prec))

    # ---------------------------------------------------------------- try/except fallbacks
    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        for sub in ast.walk(ast.Module(body=node.body, type_ignores=[])):
            if isinstance(sub, ast.Call):
                full = self.al.resolve(dotted_name(sub.func))
                if full is not None and full.split(".")[0] == "torch":
                    self.flag(sub, f"calls {full} inside an except handler: a torch fallback (pitfall 15)")
                    break
        self.generic_visit(node)

    # ---------------------------------------------------------------- kernels
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            full = self.al.resolve(dotted_name(target))
            if full in {"triton.jit", "triton.runtime.jit.jit"}:
                self.report.has_triton_kernel = True
        self.generic_visit(node)


def _defines_model_new(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "ModelNew":
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "ModelNew" for t in node.targets
        ):
            return True
    return False


def _check_cuda_strings(report: StaticReport, strings: list[str], policy: PrecisionPolicy) -> None:
    cuda_text = "\n".join(s for s in strings if "__global__" in s or "#include" in s)
    if policy is not PrecisionPolicy.BF16:
        for token in _CUDA_LOW_PRECISION:
            if token in cuda_text:
                report.violations.append(
                    f"CUDA source uses {token} under the {policy.value} policy (pitfall 7)"
                )
                break
    if policy is PrecisionPolicy.FP32_STRICT:
        for token in _CUDA_TF32:
            if token in cuda_text:
                report.violations.append(f"CUDA source uses {token} (TF32) under fp32-strict (pitfall 7)")
                break


def analyse(source: str, policy: PrecisionPolicy, require_kernel: bool) -> StaticReport:
    """Parse and check a candidate. A SyntaxError is reported in `syntax_error`, not raised."""
    report = StaticReport()
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        report.syntax_error = f"SyntaxError: {e.msg} (line {e.lineno})\n{(e.text or '').rstrip()}"
        return report
    aliases = _Aliases(tree)
    _Visitor(aliases, policy, report).visit(tree)
    strings = _strings(tree)
    report.defines_model_new = _defines_model_new(tree)
    report.has_cuda_kernel = report.needs_cuda_build and any("__global__" in s for s in strings)
    _check_cuda_strings(report, strings, policy)
    if require_kernel and not (report.has_triton_kernel or report.has_cuda_kernel):
        report.violations.append(
            "no kernel: a kernel candidate needs a @triton.jit function or a __global__ function built with "
            "torch.utils.cpp_extension.load_inline (pitfall 15)"
        )
    return report
