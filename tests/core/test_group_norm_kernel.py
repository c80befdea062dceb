"""The fused CPU kernel of LN-G (lnbook/core/group_norm_kernel.py): same values and gradients as
``F.layer_norm`` over the grouped view, independent of the thread count, used by GroupLayerNorm
on the CPU only where it may be, and a clear fallback where it cannot be built.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import mpmath
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from lnbook.core import group_norm_kernel as fused_group_norm
from lnbook.core.group_norm_kernel import fused_group_layer_norm
from tests.strategies import seeds


def reference(x: torch.Tensor, groups: int, eps: float = 1e-5) -> torch.Tensor:
    grouped = x.unflatten(-1, (groups, -1))
    return F.layer_norm(grouped, grouped.shape[-1:], eps=eps).flatten(-2)


def value_and_grad(fn, x: torch.Tensor, upstream: torch.Tensor):
    x = x.detach().clone().requires_grad_(True)
    y = fn(x)
    (dx,) = torch.autograd.grad(y, x, upstream)
    return y.detach(), dx


needs_kernel = pytest.mark.skipif(
    os.environ.get("LNBOOK_FUSED_KERNEL") == "0", reason="fused kernel switched off by LNBOOK_FUSED_KERNEL=0"
)


# One child process goes through the ways the kernel can be set up, each from a fresh start of the
# module's state (``_build`` reads the environment at first use): switched off, no compiler, and a
# build into an empty cache. It prints one status line per case, after checking that GroupLayerNorm
# then equals F.layer_norm over the grouped view (through whichever path the status names).
_SETUP_CASES = """
import json, os, sys
import torch
from lnbook.core import group_norm_kernel as f
from lnbook.core.norms import GroupLayerNorm

x = torch.randn(2, 8, dtype=torch.float64)
ref = torch.nn.functional.layer_norm(x.view(2, 2, 4), (4,)).view(2, 8)
for env in json.loads(sys.argv[1]):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    f._state.update(tried=False, lib=None, status="not built yet")
    f._CALLS.clear()
    status = f.kernel_status()
    assert torch.allclose(GroupLayerNorm(2)(x), ref), status
    print(status, flush=True)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k)
        else:
            os.environ[k] = v
"""


def _statuses_in_one_subprocess(cases: list[dict[str, str]], tmp_path) -> list[str]:
    env = {**os.environ, "LNBOOK_KERNEL_CACHE": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", _SETUP_CASES, json.dumps(cases)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == len(cases), out.stdout
    return lines


def test_the_kernel_is_built_on_this_machine():
    """CI machines have a C compiler; the speed goal of issue 12 rests on the kernel being used."""
    if os.environ.get("LNBOOK_FUSED_KERNEL") == "0":
        pytest.skip("switched off by LNBOOK_FUSED_KERNEL=0")
    assert fused_group_norm.kernel_library() is not None, fused_group_norm.kernel_status()
    assert fused_group_norm.kernel_status().startswith("built with")


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("m", [2, 3, 4, 5, 8, 16, 32, 64, 128, 256, 384])
def test_forward_and_backward_match_layer_norm_for_every_group_size(m, dtype):
    """Group sizes with a specialised loop (powers of two up to 128) and without; 203 rows per group
    count, so the last block of 64 rows is partial. Both the kernel and ATen are compared with the
    float64 result on the same inputs: the kernel's errors must be of ATen's order, root mean square
    at most 3x ATen's and the largest at most 2x ATen's or 1e-5 of the largest value. (Nearly constant
    groups make the float32 gradient ill-conditioned: at m = 2 ATen's largest error is 12x the
    kernel's, at m = 3 the kernel's is 6x ATen's, both below 1e-5 of the scale.)"""
    _check_against_layer_norm(m, 3, dtype)


def _check_against_layer_norm(m, groups, dtype, shape=(7, 29)):
    g = torch.Generator().manual_seed(m)
    x = (torch.randn(*shape, groups * m, generator=g) * 4 + 3).to(dtype)
    upstream = torch.randn(x.shape, generator=g).to(dtype)
    ours = value_and_grad(lambda t: fused_group_layer_norm(t, groups), x, upstream)
    aten = value_and_grad(lambda t: reference(t, groups), x, upstream)
    if dtype == torch.float64:  # ATen's float64 is the truth here, to rounding
        torch.testing.assert_close(ours[0], aten[0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(ours[1], aten[1], rtol=1e-10, atol=1e-11)
        return
    truth = value_and_grad(lambda t: reference(t, groups), x.double(), upstream.double())
    for got, ref, exact in zip(ours, aten, truth):
        err, err_aten = got.double() - exact, ref.double() - exact
        rms, rms_aten = err.pow(2).mean().sqrt(), err_aten.pow(2).mean().sqrt()
        assert rms <= 3 * rms_aten, (float(rms), float(rms_aten))
        largest = err.abs().max()
        assert largest <= max(2 * err_aten.abs().max(), 1e-5 * exact.abs().max()), (float(largest), float(err_aten.abs().max()))


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("m, groups", [(2, 4), (4, 2), (8, 1), (2, 132), (4, 66), (8, 33), (2, 256), (4, 3),
                                      (16, 1), (16, 33)])
def test_small_group_paths_match_layer_norm(m, groups, dtype):
    """Groups of 2, 4, 8 run sample by sample in tiles of 256 features, in float32 through 8-lane vectors
    when the width is a multiple of 8 (else, and in float64, through loops across groups): widths 8, 264
    (a partial last tile), 512 (two whole tiles) and 12, 10 (no vector path), with the same error bounds
    as the test above. float32 groups of 16 take the vector path too (two vectors a group): widths 16 and
    528 (33 groups: a last block of fewer than 8 groups)."""
    _check_against_layer_norm(m, groups, dtype, shape=(5, 13))


@needs_kernel
# (2, 16), (2, 64), (4, 8), (8, 8), (8, 16), (4, 32): full blocks of eight groups in the vector paths (referee 15 of
# chapter 5, finding 4: planting '|' -> '&' in their overflow flag passed every test; these sizes fail under it)
@pytest.mark.parametrize("m, groups", [(2, 4), (4, 2), (8, 3), (2, 132), (16, 3), (16, 9),
                                       (2, 16), (2, 64), (4, 8), (8, 8), (8, 16), (4, 32)])
@pytest.mark.parametrize("dtype_exponent", [(torch.float32, 66), (torch.float32, -100), (torch.float64, 600)])
@pytest.mark.parametrize("eps", [0.0, 1e-5])
def test_small_group_paths_are_exact_far_from_unit_scale(m, groups, dtype_exponent, eps):
    """The overflow/underflow fallback inside the small-group paths (one flag per tile, then group by
    group), on the widths those paths take, with a NaN and a constant group planted: every example of
    test_kernel_is_exact_far_from_unit_scale on these sizes, deterministically."""
    test_kernel_is_exact_far_from_unit_scale.hypothesis.inner_test(groups, m, dtype_exponent, eps, 3)
    dtype, k = dtype_exponent
    x = torch.randn(3, groups * m, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x = x.mul(2.0**k).to(dtype)
    x[0, :m] = 2.0**k  # a constant group: output 0 (eps > 0) or NaN (eps = 0, 0 / 0)
    x[1, m] = float("nan")  # a NaN: its group is NaN, the others are not
    y = fused_group_layer_norm(x, groups, eps)
    ref = reference(x.double() * 2.0**-k, groups, eps * 2.0 ** (-2 * k) if eps and k > -200 else 0.0)
    if eps:
        assert (y[0, :m] == 0).all()
    nan_group = torch.zeros(groups * m, dtype=torch.bool)
    nan_group[m:2 * m] = True
    assert torch.equal(y[1].isnan(), nan_group)
    torch.testing.assert_close(y[2].double(), ref[2], rtol=0, atol=1e-5 if dtype == torch.float32 else 1e-12)


@needs_kernel
@settings(max_examples=40)
@given(
    groups=st.integers(1, 6),
    m=st.integers(2, 40),
    rows=st.integers(1, 150),
    eps=st.sampled_from([1e-5, 1e-2, 1.0]),
    scale=st.sampled_from([1e-2, 1.0, 1e3]),
    seed=seeds,
)
def test_kernel_matches_layer_norm_property(groups, m, rows, eps, scale, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, groups * m, dtype=torch.float64, generator=g) * scale + scale
    upstream = torch.randn(x.shape, dtype=torch.float64, generator=g)
    y, dx = value_and_grad(lambda t: fused_group_layer_norm(t, groups, eps), x, upstream)
    y_ref, dx_ref = value_and_grad(lambda t: reference(t, groups, eps), x, upstream)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(dx, dx_ref, rtol=1e-9, atol=1e-9 / scale)


_EXAMPLES_OF_ISSUE_32 = [(m, dtype_exponent) for m in (32, 64, 128)
                         for dtype_exponent in ((torch.float32, 80), (torch.float32, 120), (torch.float64, 600))]


def _with_examples(test):
    """Issue 32: hypothesis had never drawn a group of 32, 64 or 128 at these scales, where the kernel's input gradient
    was 10-60% off; every such pair is an explicit example (one group, eps = 1e-5 and 0)."""
    for m, dtype_exponent in _EXAMPLES_OF_ISSUE_32:
        for eps in (1e-5, 0.0):
            test = example(groups=1, m=m, dtype_exponent=dtype_exponent, eps=eps, seed=m)(test)
    return test


@needs_kernel
@settings(max_examples=30, deadline=None)
@_with_examples
@given(
    groups=st.integers(1, 5),
    m=st.sampled_from([2, 3, 4, 8, 16, 32, 64, 128, 5]),
    dtype_exponent=st.sampled_from([(torch.float32, 66), (torch.float32, -100), (torch.float32, 120),
                                    (torch.float64, 600), (torch.float64, -520), (torch.float32, 0)]),
    eps=st.sampled_from([0.0, 1e-5]),
    seed=seeds,
)
def test_kernel_is_exact_far_from_unit_scale(groups, m, dtype_exponent, eps, seed):
    """Inputs of size 2^66 (about 1e20) or 2^120 in float32, 2^-100 (about 1e-30), 2^600 or 2^-520 in
    float64: the squared deviations overflow or underflow the input's type, and the kernel must still give
    LN-G to rounding (it recomputes such a group's statistics with scaled deviations). The reference is
    LN-G of the exactly rescaled input x / 2^k in float64 with eps / 4^k, which is the same map."""
    dtype, k = dtype_exponent
    g = torch.Generator().manual_seed(seed)
    unit = torch.randn(7, groups * m, dtype=torch.float64, generator=g).to(dtype)
    x = unit.double().mul(2.0**k).to(dtype)
    assert torch.equal(x.double() * 2.0**-k, unit.double())  # the scaling is exact
    upstream = torch.randn(x.shape, dtype=torch.float64, generator=g).to(dtype)
    y, dx = value_and_grad(lambda t: fused_group_layer_norm(t, groups, eps), x, upstream)
    assume(eps == 0 or -2 * k < 1000)  # else eps / 4^k overflows the reference's float64
    eps_unit = eps * 2.0 ** (-2 * k) if eps else 0.0
    y_ref, dx_ref = value_and_grad(lambda t: reference(t, groups, eps_unit), unit.double(), upstream.double())
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    # rounding x - mean is relative to |x|: the output's error is relative to max |x| * rstd of the group
    grouped = unit.double().unflatten(-1, (groups, -1))
    rstd = (grouped.var(-1, unbiased=False, keepdim=True) + eps_unit).rsqrt()
    spread = (1 + grouped.abs().amax(-1, keepdim=True) * rstd).expand_as(grouped).flatten(-2)
    assert ((y.double() - y_ref).abs() <= tol * spread).all(), float(((y.double() - y_ref).abs() / spread).max())
    # the gradient is a difference of terms of size rstd * |upstream| (times the same spread)
    size = (rstd * upstream.double().unflatten(-1, (groups, -1)).abs().amax(-1, keepdim=True)).expand_as(grouped)
    error = (dx.double() * 2.0**k - dx_ref).abs()
    assert (error <= 10 * tol * size.flatten(-2) * spread).all(), float((error / size.flatten(-2) / spread).max())


@needs_kernel
def test_gradcheck_and_second_derivatives():
    """gradcheck compares the kernel's backward with finite differences; gradgradcheck the double
    backward (which goes through F.layer_norm)."""
    x = torch.randn(4, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(0), requires_grad=True)
    fn = lambda t: fused_group_layer_norm(t, 6)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))


@needs_kernel
def test_non_contiguous_input_and_constant_groups():
    x = torch.randn(24, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).T  # not contiguous
    x[3, :12] = 7.0  # a constant group: with eps > 0 its output is exactly 0, not NaN
    y = fused_group_layer_norm(x, 2)
    torch.testing.assert_close(y, reference(x, 2), rtol=1e-12, atol=1e-12)
    assert torch.equal(y[3, :12], torch.zeros(12, dtype=torch.float64))


@needs_kernel
def test_results_do_not_depend_on_the_thread_count():
    x = torch.randn(512, 1024, generator=torch.Generator().manual_seed(2))  # 2**19 numbers: several chunks
    upstream = torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
    before = torch.get_num_threads()
    try:
        runs = []
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            runs.append(value_and_grad(lambda t: fused_group_layer_norm(t, 32), x, upstream))
    finally:
        torch.set_num_threads(before)
    for y, dx in runs[1:]:
        assert torch.equal(y, runs[0][0]) and torch.equal(dx, runs[0][1])


def test_bad_input_to_the_kernel_gets_clear_errors():
    with pytest.raises(TypeError, match="float32 or float64"):
        fused_group_layer_norm(torch.ones(2, 8, dtype=torch.int64), 2)
    if fused_group_norm.kernel_library() is not None:
        with pytest.raises(ValueError, match="must divide the width 8"):
            fused_group_layer_norm(torch.randn(2, 8), 3)
        with pytest.raises(ValueError, match="at least 2 features"):
            fused_group_layer_norm(torch.randn(2, 8), 8)


def test_switch_off_missing_compiler_fresh_build_and_reuse(tmp_path, monkeypatch):
    """One child process: ``LNBOOK_FUSED_KERNEL=0`` and a missing compiler fall back to F.layer_norm (same
    values, and the status says why); with the kernel on, an empty cache gets exactly one library, built
    there. Then this process, with its own hash seed, finds that library under the same name and loads it
    without rebuilding: the cache key does not depend on the process."""
    empty = tmp_path / "bin"
    empty.mkdir()
    cases = [{"LNBOOK_FUSED_KERNEL": "0"}, {"LNBOOK_FUSED_KERNEL": "1", "CC": "no-such-compiler", "PATH": str(empty)}]
    kernel_on = os.environ.get("LNBOOK_FUSED_KERNEL") != "0"
    if kernel_on:
        cases.append({"LNBOOK_FUSED_KERNEL": "1"})
    statuses = _statuses_in_one_subprocess(cases, tmp_path)
    assert statuses[0].startswith("switched off"), statuses[0]
    assert statuses[1].startswith("no C compiler found"), statuses[1]
    if not kernel_on:
        return
    built = statuses[2]
    assert built.startswith("built with") and str(tmp_path / "cache") in built, built
    libraries = list((tmp_path / "cache").glob("group_layer_norm-*.so"))
    assert len(libraries) == 1
    stamp = libraries[0].stat().st_mtime_ns
    monkeypatch.setenv("LNBOOK_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(fused_group_norm, "_state", {"tried": False, "lib": None, "status": "not built yet"})
    monkeypatch.setattr(fused_group_norm, "_CALLS", {})
    assert fused_group_norm.kernel_status() == built
    assert list((tmp_path / "cache").glob("group_layer_norm-*.so")) == libraries
    assert libraries[0].stat().st_mtime_ns == stamp  # reused, not rebuilt


# --- the operator: torch.library, affine fused, every transform equal to the F.layer_norm path

from lnbook.core.group_norm_kernel import reference_group_layer_norm  # noqa: E402
from lnbook.core.norms import GroupLayerNorm  # noqa: E402


def _affine_module(groups: int = 4, width: int = 16, seed: int = 0):
    module = GroupLayerNorm(groups, affine=True, width=width).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        module.weight.copy_(torch.randn(width, generator=g, dtype=torch.float64))
        module.bias.copy_(torch.randn(width, generator=g, dtype=torch.float64))
    ref = lambda t: reference_group_layer_norm(t, groups, module.eps, module.weight, module.bias)  # noqa: E731
    x = torch.randn(3, width, generator=g, dtype=torch.float64)
    return module, ref, x


def _cubed(fn):
    return lambda t: fn(t).pow(3).sum()


@needs_kernel
def test_the_module_runs_one_operator_that_dispatch_modes_see():
    """A dispatch mode (what FLOP counters use) sees ``lnbook.group_layer_norm``, not a bare ``empty``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    module, _, x = _affine_module()
    with Log() as log:
        module(x)
    assert log.ops == ["lnbook.group_layer_norm.default"], log.ops


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("groups", [3, 6, 12, 24])
def test_fused_affine_matches_the_decomposition_with_parameter_gradients(dtype, groups):
    """The affine map is fused into the kernel: values and the gradients of x, weight and bias equal the
    decomposition (F.layer_norm, then * weight + bias); with a weight only or a bias only too. Groups of
    16, 8, 4, 2 (float32: the vector paths, with dx, dw, db in one pass when all three are asked for). float64:
    to 1e-10; float32: within twice the float32 decomposition's own largest error against the float64
    decomposition, or 2e-5 (groups of 2 have ill-conditioned gradients, so a fixed 2e-5 fails the
    decomposition itself)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 5, 48, generator=g).to(dtype)
    upstream = torch.randn(x.shape, generator=g).to(dtype)
    reference_fn = lambda *a: reference_group_layer_norm(*a[:3], weight=a[3], bias=a[4])  # noqa: E731
    for use_w, use_b in [(True, True), (True, False), (False, True)]:
        w = (torch.randn(48, generator=g).to(dtype) if use_w else None)
        b = (torch.randn(48, generator=g).to(dtype) if use_b else None)
        results = []
        for fn, cast in ((fused_group_layer_norm, dtype), (reference_fn, dtype), (reference_fn, torch.float64)):
            leaves = [t.to(cast).clone().requires_grad_(True) if t is not None else None for t in (x, w, b)]
            y = fn(leaves[0], groups, 1e-5, leaves[1], leaves[2])
            grads = torch.autograd.grad(y, [t for t in leaves if t is not None], upstream.to(cast))
            results.append((y.detach(), *grads))
        for ours, ref, truth in zip(*results):
            if dtype == torch.float64:
                torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
                continue
            own = (ref.double() - truth).abs().max()
            assert (ours.double() - truth).abs().max() <= max(2 * own, 2e-5), (use_w, use_b)


@needs_kernel
@pytest.mark.parametrize("groups", [512, 256, 128, 64])
def test_one_pass_backward_gives_the_separate_passes_numbers_at_every_thread_count(groups):
    """Groups of 2, 4, 8, 16 (float32): the backward asked for dx, dw and db at once runs one pass over grad and
    x on one thread; it must give bit for bit the numbers of the separate passes (dx with dw only, db with
    db only) and the same bits on 1, 2 and 4 threads (2**19 numbers: several chunks)."""
    gen = torch.Generator().manual_seed(7)
    x, upstream = torch.randn(512, 1024, generator=gen), torch.randn(512, 1024, generator=gen)
    w, b = torch.randn(1024, generator=gen), torch.randn(1024, generator=gen)
    _, mean, rstd = torch.ops.lnbook.group_layer_norm(x, w, b, groups, 1e-5)
    backward = torch.ops.lnbook.group_layer_norm_backward
    before = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            runs.append(backward(upstream, x, mean, rstd, w, groups, True, True))
        torch.set_num_threads(1)
        dx, dw, _ = backward(upstream, x, mean, rstd, w, groups, True, False)
        *_, db = backward(upstream, x, mean, rstd, w, groups, False, True)
    finally:
        torch.set_num_threads(before)
    for run in runs:
        assert all(torch.equal(a, c) for a, c in zip(run, (dx, dw, db)))


@needs_kernel
def test_gradcheck_and_gradgradcheck_with_affine():
    module, ref, x = _affine_module()
    fn = lambda t, w, b: fused_group_layer_norm(t, 4, 1e-5, w, b)  # noqa: E731
    args = (x.requires_grad_(True), module.weight.detach().clone().requires_grad_(True),
            module.bias.detach().clone().requires_grad_(True))
    assert torch.autograd.gradcheck(fn, args)
    assert torch.autograd.gradgradcheck(fn, args)


@needs_kernel
def test_batched_gradients_of_the_operator():
    """Issue 22: ``jacobian(vectorize=True)``, ``hessian(vectorize=True)`` and ``is_grads_batched=True``
    raised 'Cannot access data pointer'; through the operator they equal the decomposition (torch.autograd
    batches the backward operator with its own loop; ``torch.func.vmap`` uses the operator's vmap rule,
    tested below)."""
    from torch.autograd.functional import hessian, jacobian

    module, ref, x = _affine_module()
    torch.testing.assert_close(jacobian(module, x, vectorize=True), jacobian(ref, x), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(hessian(_cubed(module), x, vectorize=True), hessian(_cubed(ref), x), rtol=1e-9, atol=1e-10)
    upstream = torch.randn(5, *x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = []
    for fn in (module, ref):
        leaf = x.clone().requires_grad_(True)
        got.append(torch.autograd.grad(fn(leaf), leaf, upstream, is_grads_batched=True)[0])
    torch.testing.assert_close(got[0], got[1], rtol=1e-10, atol=1e-12)


@needs_kernel
def test_vmap_rule_of_the_backward_operator():
    """``torch.func.vmap`` over the backward operator (batched upstream gradients, and a batched input)
    equals calling it once per batch element (the kernel itself)."""
    from torch.func import vmap

    module, _, x = _affine_module()
    backward = torch.ops.lnbook.group_layer_norm_backward
    _, mean, rstd = torch.ops.lnbook.group_layer_norm(x, module.weight, module.bias, 4, 1e-5)
    upstream = torch.randn(5, *x.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    batched = vmap(lambda g: backward(g, x, mean, rstd, module.weight.detach(), 4, True, True))(upstream)
    looped = [backward(g, x, mean, rstd, module.weight.detach(), 4, True, True) for g in upstream]
    for i, part in enumerate(batched):
        torch.testing.assert_close(part, torch.stack([r[i] for r in looped]), rtol=1e-10, atol=1e-12)
    xs = torch.randn(5, *x.shape, dtype=torch.float64)
    stats = [torch.ops.lnbook.group_layer_norm(t, None, None, 4, 1e-5)[1:] for t in xs]
    means, rstds = torch.stack([s[0] for s in stats]), torch.stack([s[1] for s in stats])
    batched = vmap(lambda g, t, mu, r: backward(g, t, mu, r, None, 4, False, True))(upstream, xs, means, rstds)
    for j in range(5):
        one = backward(upstream[j], xs[j], means[j], rstds[j], None, 4, False, True)
        torch.testing.assert_close(batched[0][j], one[0], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(batched[2][j], one[2], rtol=1e-10, atol=1e-12)


@needs_kernel
def test_torch_func_transforms_and_forward_ad():
    """jacrev, jacfwd, vmap, hessian, jvp and forward-mode AD (dual tensors) on the module equal the same
    transforms of the decomposition; vmap of the operator itself uses its own vmap rule."""
    import torch.autograd.forward_ad as fwAD
    from torch.func import hessian, jacfwd, jacrev, jvp, vmap

    module, ref, x = _affine_module()
    for transform in (jacrev, jacfwd, vmap):
        torch.testing.assert_close(transform(module)(x), transform(ref)(x), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(hessian(_cubed(module))(x), hessian(_cubed(ref))(x), rtol=1e-9, atol=1e-10)
    tangent = torch.randn_like(x)
    torch.testing.assert_close(jvp(module, (x,), (tangent,)), jvp(ref, (x,), (tangent,)), rtol=1e-10, atol=1e-12)
    with fwAD.dual_level():
        out = fwAD.unpack_dual(module(fwAD.make_dual(x, tangent)))
    torch.testing.assert_close(out.tangent, jvp(ref, (x,), (tangent,))[1], rtol=1e-10, atol=1e-12)
    op = torch.ops.lnbook.group_layer_norm
    xs = torch.randn(4, 3, 16, dtype=torch.float64)
    batched_w = torch.randn(4, 16, dtype=torch.float64)
    torch.testing.assert_close(vmap(lambda t: op(t, module.weight, module.bias, 4, 1e-5)[0])(xs), ref(xs))
    torch.testing.assert_close(vmap(lambda t, w: op(t, w, None, 4, 1e-5)[0])(xs, batched_w),
                               reference_group_layer_norm(xs, 4, 1e-5) * batched_w[:, None])


@needs_kernel
def test_fake_tensors_compile_and_export():
    """Under FakeTensorMode the module returns a fake tensor of the right shape (the ctypes kernel is
    never called; it used to crash the process); ``torch.compile(fullgraph=True)`` and ``torch.export``
    keep the operator in the graph and equal the decomposition, gradients included."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode():
        fake = GroupLayerNorm(4, affine=True, width=16)(torch.randn(7, 16))
    assert isinstance(fake, FakeTensor) and fake.shape == (7, 16)
    module, ref, x = _affine_module()
    compiled = torch.compile(module, fullgraph=True)
    torch.testing.assert_close(compiled(x), ref(x), rtol=1e-10, atol=1e-12)
    grads = []
    for fn in (compiled, ref):
        leaf = x.clone().requires_grad_(True)
        fn(leaf).pow(2).sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-12)
    exported = torch.export.export(module, (x,))
    targets = [str(n.target) for n in exported.graph.nodes if n.op == "call_function"]
    assert "lnbook.group_layer_norm.default" in targets, targets
    torch.testing.assert_close(exported.module()(x), ref(x), rtol=1e-10, atol=1e-12)


@needs_kernel
def test_parameter_gradients_do_not_depend_on_the_thread_count():
    x = torch.randn(512, 1024, generator=torch.Generator().manual_seed(2))
    upstream = torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
    w, b = torch.randn(1024), torch.randn(1024)
    before = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            leaves = [t.clone().requires_grad_(True) for t in (x, w, b)]
            y = fused_group_layer_norm(leaves[0], 32, 1e-5, leaves[1], leaves[2])
            runs.append(torch.autograd.grad(y, leaves, upstream))
    finally:
        torch.set_num_threads(before)
    for run in runs[1:]:
        assert all(torch.equal(a, c) for a, c in zip(run, runs[0]))


def test_affine_module_needs_a_width_that_the_groups_divide():
    with pytest.raises(ValueError, match="needs width="):
        GroupLayerNorm(4, affine=True)
    with pytest.raises(ValueError, match="must divide width=10"):
        GroupLayerNorm(4, affine=True, width=10)
    if fused_group_norm.kernel_library() is not None:
        with pytest.raises(ValueError, match="weight must be a"):
            fused_group_layer_norm(torch.randn(2, 8), 2, 1e-5, torch.ones(4))


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize("eps", [1e-5, 0.0])
def test_affine_module_refuses_an_input_of_another_width_naming_both(validate, eps):
    """Referee 7 of ch5, finding 7: GroupLayerNorm(2, affine=True, width=8) on a width-16 input raised PyTorch's
    broadcasting RuntimeError from the fallback; now a ValueError naming both widths, on every path (fast, validated,
    eps = 0), for inputs the groups divide and for one they do not; the right width still runs."""
    layer = GroupLayerNorm(2, eps=eps, validate=validate, affine=True, width=8)
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(0))
    for bad in (x, x[:, :10], x.unsqueeze(0)):
        with pytest.raises(ValueError, match=f"width=8 .* last dimension is {bad.shape[-1]}"):
            layer(bad)
    assert layer(x[:, :8]).shape == (3, 8)


@pytest.mark.parametrize("case", ["weight dtype", "short weight", "short bias", "groups do not divide",
                                  "groups of one", "zero groups", "negative eps", "nan eps", "infinite eps"])
def test_the_operator_itself_refuses_bad_arguments(case):
    """A direct call of ``torch.ops.lnbook.group_layer_norm`` (or a compiled/exported graph holding it) gets the
    module's checks: before, these ran and returned wrong numbers (or read past the weight in C; eps = inf gave a
    constant zero layer with a zero gradient, issue 32, fourth read)."""
    op = torch.ops.lnbook.group_layer_norm
    x = torch.randn(4, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    w64 = torch.randn(12, dtype=torch.float64)
    args = {"weight dtype": (x, torch.randn(12), torch.randn(12), 3, 1e-5),
            "short weight": (x, torch.randn(6, dtype=torch.float64), None, 3, 1e-5),
            "short bias": (x, w64, torch.randn(6, dtype=torch.float64), 3, 1e-5),
            "groups do not divide": (x, None, None, 5, 1e-5),
            "groups of one": (x, None, None, 12, 1e-5),
            "zero groups": (x, None, None, 0, 1e-5),
            "negative eps": (x, None, None, 3, -1.0),
            "nan eps": (x, None, None, 3, float("nan")),
            "infinite eps": (x, None, None, 3, float("inf"))}[case]
    match = {"weight dtype": "weight must be a torch.float64", "short weight": r"weight must be .* shape \(12,\)",
             "short bias": r"bias must be .* shape \(12,\)", "negative eps": "eps must be a finite number >= 0",
             "nan eps": "eps must be a finite number >= 0",
             "infinite eps": "eps must be a finite number >= 0"}.get(case, "must divide the width 12 into groups of at least 2")
    with pytest.raises(ValueError, match=match):
        op(*args)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode, pytest.raises(ValueError, match=match):  # the fake rule (compile, export)
        op(*(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args))
    x.requires_grad_(True)  # and through the autograd rule
    with pytest.raises(ValueError, match=match):
        op(x, *args[1:])


def test_the_backward_operator_refuses_mismatched_statistics():
    back = torch.ops.lnbook.group_layer_norm_backward
    x = torch.randn(4, 12, dtype=torch.float64)
    y, mean, rstd = torch.ops.lnbook.group_layer_norm(x, None, None, 3, 1e-5)
    back(torch.ones_like(x), x, mean, rstd, None, 3, False, False)  # the right arguments run
    with pytest.raises(ValueError, match="mean must be"):
        back(torch.ones_like(x), x, mean[:, :2], rstd, None, 3, False, False)
    with pytest.raises(ValueError, match="must divide the width 12"):
        back(torch.ones_like(x), x, mean, rstd, None, 5, False, False)
    with pytest.raises(ValueError, match="grad must be"):
        back(torch.ones(4, 6, dtype=torch.float64), x, mean, rstd, None, 3, False, False)
    with pytest.raises(ValueError, match=r"weight must be .* shape \(12,\)"):
        back(torch.ones_like(x), x, mean, rstd, torch.ones(6, dtype=torch.float64), 3, True, False)


def test_vmap_with_batched_weight_checks_its_width():
    from torch.func import vmap
    xs, ws = torch.randn(3, 4, 12, dtype=torch.float64), torch.randn(3, 6, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"weight must be .* shape \(12,\)"):
        vmap(lambda t, w: torch.ops.lnbook.group_layer_norm(t, w, None, 3, 1e-5)[0])(xs, ws)


_DEVICES = [pytest.param("cpu", id="cpu"),
            pytest.param("cuda", id="cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                      reason="no CUDA device on this machine"))]


def _operator_and_exported(device: str):
    """Issue 32: the operator called directly, and a model exported with it in its graph, beside the
    decomposition with the same float64 parameters. The export is made on the CPU (where the module puts the
    operator in its graph) and moved to ``device``."""
    module, _, x = _affine_module()
    exported = torch.export.export(module, (x,))
    assert "lnbook.group_layer_norm.default" in [str(n.target) for n in exported.graph.nodes]
    exported = exported.module().to(device)
    w, b = module.weight.detach().to(device), module.bias.detach().to(device)
    op = lambda t: torch.ops.lnbook.group_layer_norm(t, w, b, 4, 1e-5)[0]  # noqa: E731
    ref = lambda t: reference_group_layer_norm(t, 4, 1e-5, w, b)  # noqa: E731
    return {"operator": op, "exported": exported}, ref, x.to(device)


def _close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@needs_kernel
@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("subject", ["operator", "exported"])
def test_operator_and_exported_model_under_every_transform(subject, device):
    """Issue 32: forward-mode AD dropped the operator's tangents (``jvp``, ``jacfwd``, dual tensors and
    ``jacobian(strategy="forward-mode")`` gave zeros; exported ``jacfwd`` max |J| 0.0 where the truth is
    2.02) and ``jacrev``/``grad`` crashed. Each transform of the operator and of the exported model equals
    the same transform of the decomposition, float64, to 1e-10, including second derivatives (``hessian``,
    ``jacfwd(jacfwd)``, double backward)."""
    import torch.autograd.forward_ad as fwAD
    from torch.autograd.functional import jacobian
    from torch.func import grad, hessian, jacfwd, jacrev, jvp, vmap

    subjects, ref, x = _operator_and_exported(device)
    fn = subjects[subject]
    tangent = torch.randn(x.shape, dtype=x.dtype, generator=torch.Generator().manual_seed(5)).to(device)
    _close(fn(x), ref(x))
    truth = jvp(ref, (x,), (tangent,))
    assert truth[1].abs().max() > 0.1  # the tangent is not trivially zero
    _close(jvp(fn, (x,), (tangent,)), truth)
    for transform in (jacfwd, jacrev):
        _close(transform(fn)(x), transform(ref)(x))
    _close(jacfwd(jacfwd(fn))(x), jacfwd(jacfwd(ref))(x))
    xs = torch.stack([x, 2 * x - 1])  # the exported graph has a fixed shape: vmap over whole inputs
    _close(vmap(fn)(xs), vmap(ref)(xs))
    _close(vmap(jvp, in_dims=(None, 0, None))(fn, (xs,), (tangent,)),
           vmap(jvp, in_dims=(None, 0, None))(ref, (xs,), (tangent,)))
    cubed, cubed_ref = _cubed(fn), _cubed(ref)
    _close(grad(cubed)(x), grad(cubed_ref)(x))
    _close(hessian(cubed)(x), hessian(cubed_ref)(x))
    _close(vmap(grad(cubed))(xs), vmap(grad(cubed_ref))(xs))
    with fwAD.dual_level():
        dual = fwAD.unpack_dual(fn(fwAD.make_dual(x, tangent)))
    _close(dual.primal, truth[0])
    _close(dual.tangent, truth[1])
    _close(jacobian(fn, x, strategy="forward-mode", vectorize=True), jacobian(ref, x))
    _close(jacobian(fn, x), jacobian(ref, x))
    second = []
    for f in (cubed, cubed_ref):  # double backward with plain autograd
        leaf = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(f(leaf), leaf, create_graph=True)
        second.append(torch.autograd.grad(g, leaf, tangent)[0])
    _close(*second)


@needs_kernel
def test_parameter_tangents_of_the_operator():
    """Tangents of the weight and bias, and of all three inputs at once, under ``jvp`` and dual tensors."""
    import torch.autograd.forward_ad as fwAD
    from torch.func import jacfwd, jvp

    module, _, x = _affine_module()
    w, b = module.weight.detach(), module.bias.detach()
    op = lambda t, v, c: torch.ops.lnbook.group_layer_norm(t, v, c, 4, 1e-5)[0]  # noqa: E731
    ref = lambda t, v, c: reference_group_layer_norm(t, 4, 1e-5, v, c)  # noqa: E731
    g = torch.Generator().manual_seed(6)
    tangents = tuple(torch.randn(t.shape, dtype=t.dtype, generator=g) for t in (x, w, b))
    _close(jvp(op, (x, w, b), tangents), jvp(ref, (x, w, b), tangents))
    for argnums in (0, 1, 2, (0, 1, 2)):
        _close(jacfwd(op, argnums)(x, w, b), jacfwd(ref, argnums)(x, w, b))
    with fwAD.dual_level():
        dual = fwAD.unpack_dual(op(*(fwAD.make_dual(p, t) for p, t in zip((x, w, b), tangents))))
    _close(dual.tangent, jvp(ref, (x, w, b), tangents)[1])


@needs_kernel
def test_vmap_alone_keeps_the_kernel_and_plain_autograd_keeps_its_rule():
    """Only differentiating transforms and forward-mode AD run the decomposition: ``vmap`` of the operator
    still calls the operator (its vmap rule), and plain reverse mode its autograd rule."""
    from torch.func import vmap
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    module, _, x = _affine_module()
    op = lambda t: torch.ops.lnbook.group_layer_norm(t, module.weight.detach(), None, 4, 1e-5)[0]  # noqa: E731
    with Log() as log:
        vmap(op)(torch.stack([x, x]))
    assert "lnbook.group_layer_norm.default" in log.ops and "aten.native_layer_norm.default" not in log.ops, log.ops
    leaf = x.clone().requires_grad_(True)
    with Log() as log:
        op(leaf).sum().backward()
    assert "lnbook.group_layer_norm_backward.default" in log.ops, log.ops
    # reverse mode outside vmap goes through the vmap rule and the autograd rule: gradients of the decomposition
    xs = torch.stack([x, 2 * x - 1]).requires_grad_(True)
    w = module.weight.detach().clone().requires_grad_(True)
    grads = [torch.autograd.grad(vmap(f)(xs).pow(3).sum(), (xs, w)) for f in
             (lambda t: torch.ops.lnbook.group_layer_norm(t, w, None, 4, 1e-5)[0],
              lambda t: reference_group_layer_norm(t, 4, 1e-5, w))]
    for got, want in zip(*grads):
        _close(got, want)


@needs_kernel
def test_compiled_exported_model_under_jvp_and_grad():
    """``torch.compile`` of ``jvp`` and of ``grad`` of the exported model equals the decomposition."""
    from torch.func import grad, jvp

    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":  # make test-portable's first setting
        pytest.skip("ATEN_CPU_CAPABILITY=default: inductor's C++ for this float64 graph does not build without a vector ISA "
                    "('at::vec' has not been declared), a limit of inductor, not of the operator")

    subjects, ref, x = _operator_and_exported("cpu")
    fn = subjects["exported"]
    tangent = torch.randn(x.shape, dtype=x.dtype, generator=torch.Generator().manual_seed(7))
    compiled_jvp = torch.compile(lambda t, v: jvp(fn, (t,), (v,)))
    _close(compiled_jvp(x, tangent), jvp(ref, (x,), (tangent,)))
    compiled_grad = torch.compile(grad(_cubed(fn)))
    _close(compiled_grad(x), grad(_cubed(ref))(x))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_operator_called_directly_on_half_precision_gives_ln_g_and_refuses_integers(dtype):
    """The operator has a kernel for float32/float64 only: called directly (or from an exported graph) on
    float16/bfloat16 it computes LN-G with torch operations (forward and backward) instead of failing with
    a KeyError, and an integer input is refused with a TypeError that says what to do."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 32, generator=g).to(dtype).requires_grad_()
    y, mean, rstd = torch.ops.lnbook.group_layer_norm(x, None, None, 4, 1e-5)
    assert y.dtype == dtype and mean.shape == rstd.shape == (3, 4)
    ref = reference_group_layer_norm(x.detach().double(), 4, 1e-5)
    assert (y.double() - ref).abs().max() < 0.05  # a few half-precision ulps of values of size up to ~3
    (dx,) = torch.autograd.grad(y.sum() + (y * y).sum(), x)
    xd = x.detach().double().requires_grad_()
    yd = reference_group_layer_norm(xd, 4, 1e-5)
    (dx_ref,) = torch.autograd.grad(yd.sum() + (yd * yd).sum(), xd)
    assert (dx.double() - dx_ref).abs().max() < 0.1
    with pytest.raises(TypeError, match="floating-point"):
        torch.ops.lnbook.group_layer_norm(torch.ones(2, 8, dtype=torch.int64), None, None, 2, 1e-5)


@needs_kernel
def test_at_eps_zero_the_operator_is_exact_down_to_the_documented_range():
    """The documented range at eps = 0: groups of standard deviation down to about 1/FLT_MAX (3e-39) in float32
    give LN-G to rounding (the kernel rescales the deviations); below it rstd overflows, as the docstring says."""
    for scale in (1e-20, 1e-30, 1e-37, 1e-38):
        x = torch.tensor([[3.0, -2.0, 1.0, -2.0]]) * scale
        y = torch.ops.lnbook.group_layer_norm(x, None, None, 1, 0.0)[0]
        ref = reference_group_layer_norm(x.double() / scale, 1, 0.0)
        assert (y.double() - ref).abs().max() < 1e-5, scale
    tiny = torch.tensor([[3e-39, -2e-39]])  # std 2.5e-39 < 1 / FLT_MAX: outside the documented range
    assert torch.isinf(torch.ops.lnbook.group_layer_norm(tiny, None, None, 1, 0.0)[0]).all()


def _exact_backward_and_bounds(x, upstream, weight, groups, eps, u):
    """LN-G's vector-Jacobian product (dx, dweight, dbias) of the exact float inputs in 50-digit mpmath (no range
    limit, so no rescaling), and first-order rounding bounds for a kernel working with unit roundoff ``u``, as mpf
    arrays of x's shape (dx) and of width d (dweight, dbias).

    Per group of m numbers, with r = rstd, X = r max|x - mean| (the largest |xhat|), Sx = r max|x| and
    Gmax = max|g w|: the mean is off by at most m u max|x| in any order of summation and r by (m + 6) u relative
    (squares, sum, sqrt, division, or the rescaled path of stats_safe), so |d xhat| <= (m + 6) u (Sx + X); then
    mean(g w) and c = mean(g w xhat) (|c| <= Gmax X) add m u each, and the last subtractions and the product with r
    a few u of |dx| / r <= Gmax (2 + X^2); together |d dx| <= 4 (m + 6) u (1 + Sx + X)^2 r Gmax, and twice that is
    asserted. dweight = sum over samples of g xhat: |d dweight| <= 2 (m + n + 6) u sum_s |g| (1 + Sx + X) over n
    samples; dbias = sum of g: 2 n u sum_s |g|."""
    mp, mpf = mpmath, mpmath.mpf
    rows, d = x.shape
    m = d // groups
    xs = [[mpf(v) for v in row] for row in x.double().tolist()]
    gs = [[mpf(v) for v in row] for row in upstream.double().tolist()]
    ws = [mpf(v) for v in weight.double().tolist()] if weight is not None else [mpf(1)] * d
    dx = [[None] * d for _ in range(rows)]
    dx_bound = [[None] * d for _ in range(rows)]
    dw, db = [mpf(0)] * d, [mpf(0)] * d
    dw_bound, db_bound = [mpf(0)] * d, [mpf(0)] * d
    for s_ in range(rows):
        for k in range(groups):
            f = range(k * m, (k + 1) * m)
            xg = [xs[s_][j] for j in f]
            gw = [gs[s_][j] * ws[j] for j in f]
            mean = mp.fsum(xg) / m
            r = 1 / mp.sqrt(mp.fsum((v - mean) ** 2 for v in xg) / m + mpf(eps))
            xhat = [(v - mean) * r for v in xg]
            a = mp.fsum(gw) / m
            c = mp.fsum(p * q for p, q in zip(gw, xhat)) / m
            big_x, big_s = max(abs(v) for v in xhat), r * max(abs(v) for v in xg)
            gmax = max(abs(v) for v in gw)
            row_bound = 8 * (m + 6) * u * (1 + big_s + big_x) ** 2 * r * gmax
            for i, j in enumerate(f):
                dx[s_][j] = r * (gw[i] - a - xhat[i] * c)
                dx_bound[s_][j] = row_bound
                dw[j] += gs[s_][j] * xhat[i]
                db[j] += gs[s_][j]
                dw_bound[j] += 2 * (m + rows // groups + 6) * u * abs(gs[s_][j]) * (1 + big_s + big_x)
                db_bound[j] += 2 * (rows // groups) * u * abs(gs[s_][j])
    return dx, dx_bound, dw, dw_bound, db, db_bound


def _worst_ratio(got, exact, bound):
    """max |got - exact| / bound over the entries, in mpmath (bounds far below the float range stay exact)."""
    flat = lambda t: [v for row in t for v in row] if isinstance(t[0], list) else list(t)  # noqa: E731
    return max(abs(mpmath.mpf(float(a)) - b) / c for a, b, c in zip(flat(got), flat(exact), flat(bound)))


# The float32 scales 2^80 and 2^120 (squared deviations overflow, rstd^2 underflows), 2^125 (|x| up to 3 * 2^125,
# below half of FLT_MAX: sum(g (x - mean)) overflows there), 2^-100 at eps = 0 (rstd^2 overflows); float64 2^600 and
# 2^1000 (|x| up to 3 * 2^1000, below half of DBL_MAX) and 2^-600 at eps = 0.
_FAR_SCALES = [(torch.float32, 80, 1e-5), (torch.float32, 120, 1e-5), (torch.float32, 125, 1e-5),
               (torch.float32, -100, 0.0),
               (torch.float64, 600, 1e-5), (torch.float64, 1000, 1e-5), (torch.float64, -600, 0.0)]


@needs_kernel
@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("dtype, k, eps", _FAR_SCALES, ids=[f"{str(t)[6:]}-2^{k}" for t, k, _ in _FAR_SCALES])
@pytest.mark.parametrize("m", [2, 4, 8, 16, 31, 32, 33, 64, 128, 256])
def test_the_backward_is_exact_for_every_group_size_far_from_unit_scale(m, dtype, k, eps, affine):
    """Issue 32 (second referee read of chapter 5): the kernel's float32 input gradient was 10-60% off for groups of
    32, 64 and 128 at |x| ~ 2^80 (under -fassociative-math GCC formed rstd * rstd, which underflows there), and a
    host-side fallback hid it. The kernel now forms c = mean(g w xhat) from xhat and keeps it opaque to the optimiser.
    Every specialised group size, a neighbour either side of 32 and 256, at the scales of _FAR_SCALES, with and
    without the affine map (which runs the one-call backward of dx, dw, db), 3 samples of 2 groups, inputs rounded
    from N(0, 1) clipped to 3 (exactly scaled by 2^k): dx, dweight and dbias against the exact vector-Jacobian product
    of the same float inputs, within the first-order rounding bounds of _exact_backward_and_bounds."""
    gen = torch.Generator().manual_seed(1000 * m + k)
    unit = torch.randn(3, 2 * m, dtype=torch.float64, generator=gen).clamp(-3, 3).to(dtype)
    x = (unit.double() * 2.0**k).to(dtype)
    assert torch.equal(x.double() * 2.0**-k, unit.double()) and bool(x.isfinite().all())  # the scaling is exact
    upstream = torch.randn(x.shape, dtype=torch.float64, generator=gen).to(dtype)
    weight = (1 + 0.5 * torch.randn(2 * m, dtype=torch.float64, generator=gen)).to(dtype) if affine else None
    bias = torch.zeros(2 * m, dtype=dtype) if affine else None
    leaves = [x.requires_grad_()] + ([weight.requires_grad_(), bias.requires_grad_()] if affine else [])
    y = fused_group_layer_norm(x, 2, eps, weight, bias)
    grads = torch.autograd.grad(y, leaves, upstream)
    u = torch.finfo(dtype).eps / 2
    with mpmath.workdps(50):
        dx, dx_bound, dw, dw_bound, db, db_bound = _exact_backward_and_bounds(
            x.detach(), upstream, weight.detach() if affine else None, 2, eps, u)
        assert _worst_ratio(grads[0].tolist(), dx, dx_bound) <= 1
        if affine:
            assert _worst_ratio(grads[1].tolist(), dw, dw_bound) <= 1
            assert _worst_ratio(grads[2].tolist(), db, db_bound) <= 1


@pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")
def test_the_kernel_compiles_with_every_flag_set_and_without_avx(tmp_path):
    """Every fallback flag set of the build compiles the kernel, and so does a baseline x86-64 target without AVX
    (``-march=x86-64``, ``-march=x86-64-v2``) where the compiler targets x86: the vector code's optimisation barrier
    used a one-register asm constraint that holds a 32-byte vector only with AVX, so the kernel was silently off (F.layer_norm
    over the grouped view) on every CPU without AVX and with every flag set but ``-march=native`` (a referee's
    finding; planted back: the "+x" constraint without its #ifdef fails every set here)."""
    import platform

    from lnbook.core import group_norm_kernel as kernel

    compiler = shutil.which(os.environ.get("CC", "cc"))
    sets = [list(s) for s in kernel.OPTIONAL_FLAG_SETS if "-march=native" not in s]  # native: built at first use
    if platform.machine() in ("x86_64", "AMD64"):
        sets += [["-march=x86-64"]]
    failed = [s for i, s in enumerate(sets) if not kernel._compile(compiler, s, tmp_path / f"k{i}.so")]
    assert failed == [], f"the kernel does not compile with {failed}"
