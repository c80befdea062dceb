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
@given(st.floats(0.1, 5.0), st.floats(0.0, 0.5))
def test_fold_curve_is_even_and_peaks_at_zero(shift, eps):
    t = torch.linspace(-4, 4, 161, dtype=torch.float64)
    v = fold_curve(t, shift, eps=eps)
    torch.testing.assert_close(v, v.flip(0), rtol=0, atol=1e-14)  # "absolute value": f(t) = f(-t)
    assert int(v.argmax()) == 80
    torch.testing.assert_close(v, shift / torch.sqrt(t**2 + shift**2 + eps))


def test_activation_curve_is_a_sigmoid_from_minus_one_to_one():
    t = torch.linspace(-50, 50, 1001, dtype=torch.float64)
    v = activation_curve(t, eps=1.0)
    assert bool((v.diff() > 0).all()) and -1 < float(v.min()) < -0.999 and 0.999 < float(v.max()) < 1
    torch.testing.assert_close(activation_curve(t, eps=0.0)[t != 0], torch.sign(t[t != 0]))


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
