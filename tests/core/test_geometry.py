"""lnbook.core.geometry: the core map, stretching, folding and their curves/surfaces.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.core.geometry import (
    activation_curve,
    activation_surface,
    circle_points,
    fold,
    fold_curve,
    spherical_normalize,
    stretch,
    stretch_curve,
)
from tests.strategies import randn, seeds


@settings(max_examples=40)
@given(seeds, st.floats(0.05, 20.0), st.floats(-5.0, 5.0))
def test_stretch_and_fold_outputs_lie_on_unit_sphere(seed, factor, shift):
    x = randn(20, 3, seed=seed)
    for y in (stretch(x, factor, direction=1), fold(x, shift, direction=[1.0, 2.0, -1.0])):
        torch.testing.assert_close(y.norm(dim=-1), torch.ones(20, dtype=torch.float64), rtol=0, atol=1e-12)


def test_stretch_by_one_and_fold_by_zero_are_the_core_map():
    x = randn(10, 4, seed=3)
    torch.testing.assert_close(stretch(x, 1.0, direction=2), spherical_normalize(x))
    torch.testing.assert_close(fold(x, 0.0, direction=0), spherical_normalize(x))


@pytest.mark.parametrize("factor", [0.3, 1.0, 2.0, 5.0, 40.0])
def test_stretch_curve_is_first_coordinate_of_stretched_circle(factor):
    pts = circle_points(360)
    torch.testing.assert_close(stretch(pts, factor, direction=0)[:, 0], stretch_curve(pts[:, 0], factor), rtol=0, atol=1e-12)


def test_stretch_curve_tends_to_sign():
    c = torch.tensor([-0.9, -0.2, 0.05, 0.6], dtype=torch.float64)
    assert torch.allclose(stretch_curve(c, 1e4), torch.sign(c), atol=1e-3)
    torch.testing.assert_close(stretch_curve(c, 1.0), c)


@settings(max_examples=40)
@given(st.floats(0.1, 5.0), st.floats(0.0, 0.5), st.sampled_from([1.0, -1.0]))
def test_fold_curve_is_even_and_peaks_at_zero(size, eps, sign):
    """The fold curve s / sqrt(t^2 + s^2 + eps) is even for every shift s; its peak (maximum) is at t = 0 only
    for s > 0. For s < 0 it is the negative curve, whose maximum is at the ends and whose minimum is at t = 0."""
    shift = sign * size
    t = torch.linspace(-4, 4, 161, dtype=torch.float64)
    v = fold_curve(t, shift, eps=eps)
    torch.testing.assert_close(v, v.flip(0), rtol=0, atol=1e-14)  # "absolute value": f(t) = f(-t)
    torch.testing.assert_close(v, shift / torch.sqrt(t**2 + shift**2 + eps))
    if shift > 0:
        assert int(v.argmax()) == 80 and bool((v[:80].diff() > 0).all())  # increasing up to the peak at t = 0
    else:
        assert int(v.argmin()) == 80 and int(v.argmax()) in (0, 160)  # t = 0 is the bottom, not the peak


def test_fold_curve_at_zero_shift_is_zero_with_eps_and_undefined_at_the_origin_without():
    t = torch.linspace(-4, 4, 161, dtype=torch.float64)
    torch.testing.assert_close(fold_curve(t, 0.0, eps=1e-3), torch.zeros_like(t))
    torch.testing.assert_close(fold_curve(t[t != 0], 0.0, eps=0.0), torch.zeros_like(t[t != 0]))
    with pytest.raises(ValueError, match="eps > 0"):
        fold_curve(torch.tensor([-1.0, 0.0, 1.0], dtype=torch.float64), 0.0, eps=0.0)  # t = 0 is the origin: 0/0


@pytest.mark.parametrize("eps", [1e-6, 1.0, 25.0])
def test_activation_curve_is_a_sigmoid_from_minus_one_to_one(eps):
    """For eps > 0 the 1-D core map t / sqrt(t^2 + eps) is smooth and strictly increasing from -1 to 1, with
    slope 1/sqrt(eps) at 0 (a sigmoid)."""
    t = torch.linspace(-50, 50, 1001, dtype=torch.float64) * max(1.0, eps)
    v = activation_curve(t, eps=eps)
    assert bool((v.diff() > 0).all()) and -1 < float(v.min()) < -0.99 and 0.99 < float(v.max()) < 1
    slope = torch.func.grad(lambda s: activation_curve(s, eps=eps).sum())(torch.zeros(1, dtype=torch.float64))
    torch.testing.assert_close(slope, torch.full((1,), eps**-0.5, dtype=torch.float64))


def test_activation_curve_at_eps_zero_is_the_sign_not_a_sigmoid():
    """At eps = 0 the 1-D core map is sign(t): constant on each side of 0 (no increasing stretch), undefined at 0."""
    t = torch.linspace(-50, 50, 1000, dtype=torch.float64)  # 0 is not a grid point
    v = activation_curve(t, eps=0.0)
    torch.testing.assert_close(v, torch.sign(t), rtol=0, atol=0)
    assert not bool((v.diff() > 0).all())  # not strictly increasing: a step, not a sigmoid
    with pytest.raises(ValueError, match="eps > 0"):
        activation_curve(torch.zeros(1, dtype=torch.float64), eps=0.0)


def test_activation_surface_slices_are_the_curves():
    t = torch.linspace(-3, 3, 61, dtype=torch.float64)
    s = 0.7
    torch.testing.assert_close(activation_surface(t, torch.tensor(s, dtype=torch.float64), coordinate=1), fold_curve(t, s))
    torch.testing.assert_close(activation_surface(t, torch.tensor(s, dtype=torch.float64), coordinate=0), activation_curve(t, eps=s**2))


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: spherical_normalize(torch.zeros(2, 3)), ValueError, "eps > 0"),
        (lambda: stretch(torch.ones(2, 3), 2.0, direction=5), ValueError, "out of range"),
        (lambda: fold(torch.ones(2, 3), 1.0, direction=[1.0, 0.0]), ValueError, r"shape \(3,\)"),
        (lambda: fold(torch.ones(2, 3), 1.0, direction=[0.0, 0.0, 0.0]), ValueError, "non-zero"),
        (lambda: stretch_curve(torch.tensor([1.5], dtype=torch.float64), 2.0), ValueError, r"\|c\| <= 1"),
        (lambda: activation_surface(torch.zeros(2), torch.zeros(2), coordinate=2), ValueError, "coordinate must be 0 or 1"),
        (lambda: fold(torch.tensor([[float("nan"), 1.0]]), 1.0), ValueError, "non-finite"),
    ],
)
def test_bad_input_gets_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call()
