"""lnbook.isometry.gaussian_quadrature: the one-dimensional quadrature converges under refinement or refuses."""

import math

import numpy as np
import pytest

from lnbook.isometry import gaussian_quadrature as Q
from lnbook.isometry import hermite as H


def test_quadrature_refuses_an_activation_that_is_not_locally_bounded():
    """|x|^-0.6 + x is not in L^2(N(0,1)) (E|Z|^-1.2 = inf), but no Gauss-Legendre node lands on 0, so one set of
    panels returns a finite number (about 0.08 for beta_0). Halving the panels moves E sigma^2 by ~18% of itself:
    the quadrature refuses. A kink off the breakpoints (relu(x - 1/2), a jump at 1/2) is refused the same way."""
    for f in (lambda x: np.abs(x) ** -0.6 + x, lambda x: np.abs(x) ** -0.3,
              lambda x: np.maximum(x - 0.5, 0.0), lambda x: (x > 0.5) * 1.0):
        with pytest.raises(ValueError, match="does not converge"):
            H.nonlinearity_strength(f)
    with pytest.raises(ValueError, match="locally bounded"):
        H.mean_and_variance(lambda x: np.abs(x) ** -0.6)
    # the module docstring's figure: without its breakpoint relu(x - 1/2) moves by 1.7e-4 of E|g| under refinement
    with pytest.raises(ValueError, match=r"by 1\.7e-04 of"):
        H.nonlinearity_strength(lambda x: np.maximum(x - 0.5, 0.0))
    # locally bounded and with its jump passed: accepted, and exact (c_1 = E[Z 1{Z > 1/2}] = phi(1/2))
    assert H.hermite_coefficients(lambda x: (x > 0.5) * 1.0, 1, breakpoints=(0.5,))[1] == pytest.approx(
        math.exp(-0.125) / math.sqrt(2 * math.pi), abs=1e-13)


def test_refinement_check_accepts_smooth_and_split_integrands():
    """The check refuses nothing that converges: ReLU (kink at the default breakpoint), tanh, exp(3x) (window
    widened) and He_7 ReLU return the same value as before, and a zero integrand passes (0 <= tol * 0)."""
    for g in (lambda x: np.maximum(x, 0.0), np.tanh, lambda x: np.exp(3 * x),
              lambda x: H.hermite_polynomials(x, 7, normalized=True)[7] * np.maximum(x, 0.0), np.zeros_like):
        Q.gaussian_expectation(g)
    assert Q.gaussian_expectation(lambda x: np.exp(3 * x)) == pytest.approx(math.exp(4.5), rel=1e-13)
    assert Q.REFINEMENT_RTOL == 1e-6


def test_a_feature_narrower_than_the_node_spacing_is_invisible_to_the_refinement_check():
    """The limit the chapter states: a smooth bump of width 0.002 at 2.3 passes the check and reads beta_0 = 1 (true
    value about 1 - 7e-5), while the same bump at width 0.01 is refused; passing breakpoints around it resolves it."""
    narrow = lambda x: x + np.exp(-(((x - 2.3) / 0.002) ** 2))  # noqa: E731
    wide = lambda x: x + np.exp(-(((x - 2.3) / 0.01) ** 2))  # noqa: E731
    assert H.nonlinearity_strength(narrow) == 1.0
    with pytest.raises(ValueError):
        H.nonlinearity_strength(wide)
    resolved = H.nonlinearity_strength(narrow, breakpoints=(0.0, 2.29, 2.295, 2.3, 2.305, 2.31))
    assert 1 - 1e-4 < resolved < 1 - 5e-5
