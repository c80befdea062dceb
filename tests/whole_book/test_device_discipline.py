"""Device discipline, read statically from the package's source (the rule is in ``lnbook/util/device.py``).

Two checks over every module of ``lnbook/`` (its abstract syntax tree, no import):

* **to numpy through the CPU**: ``t.numpy()`` raises on a CUDA tensor, so every ``.numpy()`` call has a
  ``.cpu()`` (or ``.to("cpu", ...)``) earlier in the same chain. On a CPU tensor ``.cpu()`` returns the
  tensor itself, so the rule costs nothing and changes no number. (``.item()`` and ``.tolist()`` work on
  CUDA tensors, a synchronisation each, so they are not flagged.)
* **factories on the device**: inside a function that takes a ``device`` argument, a tensor made by a torch
  factory (``torch.tensor``, ``torch.zeros``, ``torch.randn``, ...) names its ``device=``, or the expression it
  sits in ends in ``.to(...)``. Index draws ``torch.randperm``/``torch.randint`` with ``generator=`` are exempt: the
  book draws them from CPU generators so that a seed gives the same batches on every device, and a tensor on any
  device can be indexed with a CPU index tensor.

What neither this nor ``tests/whole_book/test_device_meta.py`` (the meta device) can see: numerical differences
(TF32 products, other reduction orders, kernels of other rounding), ops that exist only on CUDA or behave
differently there, ``np.asarray(t)`` on a CUDA tensor (the argument's type is not known statically), and
anything that depends on memory or time. Those need a run on a GPU (``bash .device/run-on-device``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import lnbook

PACKAGE = Path(lnbook.__file__).parent
FACTORIES = {"tensor", "zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "rand", "randn",
             "randint", "randperm", "normal"}

# (module, function, what): justified exceptions, one reason each
ALLOWED: dict[tuple[str, str, str], str] = {
    ("lnbook.isometry.mlp_at_init", "make_inputs", "torch.randn(...) without device="):
        "drawn from the caller's CPU generator and conditioned in float64 on the CPU (the same inputs on every "
        "device), moved to the device by its return statement",
    ("lnbook.ln_activation.shallow_fits", "train_shallow_net", "torch.linspace(...) without device="):
        "the training points, on which the target g is evaluated on the CPU, are handed to train(), which moves them",
    ("lnbook.ln_activation.shallow_fits", "_train_side_by_side", "torch.linspace(...) without device="):
        "the target g is evaluated on the CPU, then points and targets are moved (the next two statements)",
}


def _chain(node: ast.AST):
    """The receivers of a method chain ``a.b().c().d()``, outermost first."""
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            yield node
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return


def _goes_through_cpu(call: ast.Call) -> bool:
    for attr in list(_chain(call))[1:]:
        if attr.attr == "cpu":
            return True
        if attr.attr == "to" and isinstance(parent_call := _PARENT.get(attr), ast.Call):
            args = parent_call.args
            if args and isinstance(args[0], ast.Constant) and args[0].value == "cpu":
                return True
    return False


_PARENT: dict[ast.AST, ast.AST] = {}


def _is_factory(call: ast.Call) -> bool:
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr in FACTORIES and isinstance(f.value, ast.Name) and f.value.id == "torch"):
        return False
    return not (f.attr in ("randperm", "randint") and any(k.arg == "generator" for k in call.keywords))


def _moved(node: ast.AST, stop: ast.AST) -> bool:
    """Whether ``node`` sits inside an expression that calls ``.to(...)`` or ``.cuda()`` on it (within ``stop``)."""
    while node is not stop and node in _PARENT:
        up = _PARENT[node]
        if isinstance(up, ast.Attribute) and up.attr in ("to", "cuda") and up.value is node:
            return True
        if isinstance(up, ast.stmt):
            return False
        node = up
    return False


def _takes_device(fn: ast.AST) -> bool:
    a = fn.args
    return any(p.arg == "device" for p in a.posonlyargs + a.args + a.kwonlyargs)


def findings(source: str, module: str) -> list[tuple[str, str, str, int]]:
    """``(module, function, what, line)`` for every breach of the two rules in ``source``."""
    tree = ast.parse(source)
    _PARENT.clear()
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            _PARENT[child] = parent
    out = []

    def visit(node: ast.AST, functions: list[ast.AST]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            functions = functions + [node]
        if isinstance(node, ast.Call):
            name = getattr(functions[-1], "name", "<lambda>") if functions else "<module>"
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "numpy" and not node.args and not _goes_through_cpu(node):
                out.append((module, name, ".numpy() without .cpu()", node.lineno))
            device_fn = next((fn for fn in reversed(functions) if not isinstance(fn, ast.Lambda) and _takes_device(fn)), None)
            if (device_fn is not None and _is_factory(node) and not any(k.arg == "device" for k in node.keywords)
                    and not _moved(node, device_fn)):
                out.append((module, name, f"torch.{f.attr}(...) without device=", node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, functions)

    visit(tree, [])
    return out


def package_findings() -> list[tuple[str, str, str, int]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found += findings(path.read_text(), module)
    return found


def test_the_package_keeps_device_discipline():
    breaches = [f"{m}:{line} in {fn}: {what}" for m, fn, what, line in package_findings()
                if (m, fn, what) not in ALLOWED]
    assert not breaches, "device discipline (lnbook/util/device.py):\n" + "\n".join(breaches)


def test_every_allowed_exception_is_still_needed():
    seen = {(m, fn, what) for m, fn, what, _ in package_findings()}
    assert not set(ALLOWED) - seen, f"no longer needed, remove from ALLOWED: {set(ALLOWED) - seen}"


@pytest.mark.parametrize("source, expected", [
    ("def f(t):\n    return t.numpy()\n", [".numpy() without .cpu()"]),
    ("def f(t):\n    return t.detach().numpy()\n", [".numpy() without .cpu()"]),
    ("def f(t):\n    return (t @ t).numpy()\n", [".numpy() without .cpu()"]),
    ("def f(t):\n    return t.detach().cpu().numpy()\n", []),
    ("def f(t):\n    return t[0].cpu()[1:].numpy()\n", []),
    ("def f(t):\n    return t.to('cpu', torch.float64).numpy()\n", []),
    ("def f(x, device=None):\n    return torch.zeros(3) + x\n", ["torch.zeros(...) without device="]),
    ("def f(x, *, device=None):\n    def g():\n        return torch.arange(3)\n    return g()\n",
     ["torch.arange(...) without device="]),
    ("def f(x, device=None):\n    return torch.zeros(3, device=device)\n", []),
    ("def f(x, device=None):\n    return (torch.randn(3, generator=g) / 2).to(device)\n", []),
    ("def f(x):\n    return torch.zeros(3)\n", []),
    ("def f(x, device=None):\n    return x[torch.randperm(3, generator=g)]\n", []),
    ("def f(x, device=None):\n    return x + torch.randn(3, generator=g)\n", ["torch.randn(...) without device="]),
])
def test_the_check_sees_what_it_should(source, expected):
    assert [what for _, _, what, _ in findings(source, "m")] == expected
