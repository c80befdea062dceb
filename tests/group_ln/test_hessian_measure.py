"""Chapter 5: the Hessian nonlinearity measure H, its closed form for LN-G and the growth law.
"""

from __future__ import annotations

import math

import pytest
import sympy as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lnbook.core.norms import GroupLayerNorm, ParallelLayerNorm
from lnbook.group_ln.hessian_measure import (
    chi2_inverse_mean,
    chi2_inverse_square_mean,
    group_ln_map,
    hessian_nonlinearity,
    hessian_sq_norms,
    input_scale,
    ln_g_hessian_sq_norms,
    pointwise_growth_bound,
    predicted_jacobian_sq_norm,
    predicted_nonlinearity,
    probe_hessian_sq_norms,
    readout_hessian_sq_norms,
)


def _gauss(n, d, seed, dtype=torch.float64):
    return torch.randn(n, d, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _mean_and_se(values: torch.Tensor) -> tuple[float, float]:
    return float(values.mean()), float(values.std()) / math.sqrt(len(values))


@pytest.mark.parametrize("d,groups", [(6, 1), (12, 1), (12, 2), (12, 3), (16, 8), (24, 4)])
@pytest.mark.parametrize("eps", [0.0, 1e-5, 0.3])
def test_exact_hessian_matches_closed_form(d, groups, eps):
    x = _gauss(7, d, seed=d + groups) * 2 + 1
    auto = hessian_sq_norms(group_ln_map(groups, eps), x)
    closed = ln_g_hessian_sq_norms(x, groups, eps)
    torch.testing.assert_close(auto, closed, rtol=1e-9, atol=1e-20)  # m = 2, eps = 0: exactly 0 vs rounding


def test_closed_form_keeps_the_input_dtype_and_device(monkeypatch):
    """The closed form is evaluated in float64 on the CPU, and the result goes back to x's dtype and device.
    Without an accelerator the move is checked on the CPU evaluation itself: a tensor subclass records the
    last ``.to`` applied to it, which must name x's device and dtype. With CUDA, a CUDA input gives a CUDA
    result equal to the CPU one."""
    import lnbook.group_ln.hessian_measure as hm

    x = _gauss(5, 8, seed=3, dtype=torch.float32)
    out = ln_g_hessian_sq_norms(x, 2)
    assert out.dtype == torch.float32 and out.device == x.device

    class Recorded(torch.Tensor):
        moves: list = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.Tensor.to:
                cls.moves.append(dict(kwargs or {}))
            return super().__torch_function__(func, types, args, kwargs or {})

    real = hm.layer_norm_hessian_frobenius
    monkeypatch.setattr(hm, "layer_norm_hessian_frobenius", lambda *a, **k: real(*a, **k).as_subclass(Recorded))
    ln_g_hessian_sq_norms(x, 2)
    assert Recorded.moves[-1] == {"device": x.device, "dtype": x.dtype}, Recorded.moves
    monkeypatch.undo()
    if torch.cuda.is_available():
        on_gpu = ln_g_hessian_sq_norms(x.cuda(), 2)
        assert on_gpu.device.type == "cuda"
        torch.testing.assert_close(on_gpu.cpu(), out)


def test_modules_have_the_same_hessian_as_the_plain_map():
    """The fast module path (F.layer_norm) differentiates twice like the elementary formula; PLN with
    p = 2 and group size g is LN-G with d / g groups."""
    x = _gauss(5, 16, seed=3)
    ref = ln_g_hessian_sq_norms(x, 4, 1e-5)
    for f in (GroupLayerNorm(4), ParallelLayerNorm(4), torch.nn.GroupNorm(4, 16, affine=False)):
        torch.testing.assert_close(hessian_sq_norms(f, x), ref, rtol=1e-9, atol=0)
    # a p != 2 PLN is a different map
    assert not torch.allclose(hessian_sq_norms(ParallelLayerNorm(4, p=1.5), x), ref, rtol=1e-3)


@pytest.mark.parametrize("estimator", [readout_hessian_sq_norms, probe_hessian_sq_norms])
def test_readout_and_probe_estimators_are_unbiased(estimator):
    """Repeating one input 4000 times gives 4000 independent read-outs/probes: their mean is within
    5 standard errors of the exact value (a biased estimator, e.g. one whose read-out equals the
    input, fails by far: see the next test). What this can detect: 5 standard errors are about 4% of the
    value for read-outs and 8% for probes, so a bias of a few percent would pass; the theorem's
    measurements (test_measured_curve_matches_prediction) are held to the same 5 standard errors."""
    x = _gauss(3, 12, seed=5)
    exact = hessian_sq_norms(group_ln_map(3, 1e-5), x)
    for i in range(3):
        vals = estimator(group_ln_map(3, 1e-5), x[i : i + 1].repeat(4000, 1), 1, torch.Generator().manual_seed(11 + i))
        mean, se = _mean_and_se(vals)
        assert abs(mean - float(exact[i])) < 5 * se, (i, mean, float(exact[i]), se)


def test_readouts_equal_to_the_input_are_biased():
    """Why the default read-out generator is not seeded with 0: read-outs equal to the inputs (both drawn
    from seed 0) align with the centred input and overestimate the norm by more than 10x (such draws are now refused),
    while the
    default read-outs land within 20% of the exact mean over these 20 inputs (0.95 of it here)."""
    x = _gauss(20, 64, seed=0)
    f = group_ln_map(1, 0.0)
    exact = float(hessian_sq_norms(f, x).mean())
    with pytest.raises(ValueError, match="read-outs drawn are the inputs"):  # now refused (the next test)
        readout_hessian_sq_norms(f, x, 1, torch.Generator().manual_seed(0))
    # what such read-outs would give, computed by hand: u = x for every sample
    biased = float(torch.func.vmap(lambda v: torch.func.hessian(lambda w: (f(w[None])[0] * v).sum())(v).pow(2).sum())(x).mean())
    fair = float(readout_hessian_sq_norms(f, x, 1).mean())
    assert biased > 10 * exact and abs(fair - exact) < 0.2 * exact


def test_affine_maps_have_zero_nonlinearity_and_scale_freeness():
    x = _gauss(50, 8, seed=2)
    lin = torch.nn.Linear(8, 5).double()
    assert hessian_nonlinearity(lin, x).value < 1e-20
    # eps = 0: LN-G ignores the scale of its input, and so does H (s^4 cancels the Hessian's s^-4)
    f = group_ln_map(2, 0.0)
    h1, h2 = hessian_nonlinearity(f, x), hessian_nonlinearity(f, 37.5 * x)
    assert h2.scale == pytest.approx(37.5**2 * h1.scale, rel=1e-12)
    assert h2.value == pytest.approx(h1.value, rel=1e-9)
    # with eps > 0 it does not: large inputs see eps as negligible, tiny ones see a flatter map
    g = group_ln_map(2, 1e-2)
    assert hessian_nonlinearity(g, 1e-2 * x).value < 0.5 * hessian_nonlinearity(g, x).value


def test_chi_square_inverse_square_moment_sympy():
    """E[1/X^2] = 1/((k-2)(k-4)) for X ~ chi^2_k, k > 4, exactly; the integral diverges for k <= 4."""
    t = sp.symbols("t", positive=True)
    for k in range(1, 13):
        density = t ** sp.Rational(k, 2) / t * sp.exp(-t / 2) / (2 ** sp.Rational(k, 2) * sp.gamma(sp.Rational(k, 2)))
        moment = sp.integrate(density / t**2, (t, 0, sp.oo))
        if k <= 4:
            assert moment == sp.oo
            assert chi2_inverse_square_mean(k) == math.inf
        else:
            assert sp.simplify(moment - sp.Rational(1, (k - 2) * (k - 4))) == 0
            assert chi2_inverse_square_mean(k) == pytest.approx(1 / ((k - 2) * (k - 4)), rel=1e-15)


def test_growth_law_sympy():
    """H = 3G phi(m) with phi(m) = m(m-2)/((m-3)(m-5)): phi > 1 and decreasing for m > 5, so
    H(LN-G) >= 3G and H(LN-G)/H(LN) >= G; and 3G phi(d/G) is the closed form 3d(m-2)/((m-3)(m-5))."""
    m, G = sp.symbols("m G", positive=True)
    phi = m * (m - 2) / ((m - 3) * (m - 5))
    # the closed form is derived, not restated: 3 G m (m - 2) E[X^-2] with E[X^-2] integrated from the
    # chi-square density with nu = m - 1 degrees of freedom (symbolic in m, for m > 5)
    t = sp.symbols("t", positive=True)
    nu = m - 1
    density = t ** (nu / 2 - 1) * sp.exp(-t / 2) / (2 ** (nu / 2) * sp.gamma(nu / 2))
    moment = sp.integrate(t**-2 * density, (t, 0, sp.oo), conds="none")
    derived = 3 * G * m * (m - 2) * sp.gammasimp(moment)
    for mv in (6, 7, 10, 33):  # against the theorem's 3 d (m - 2)/((m - 3)(m - 5)), d = G m
        assert sp.simplify(derived.subs({m: mv}) - 3 * (G * mv) * (mv - 2) / ((mv - 3) * (mv - 5))) == 0
    assert sp.gammasimp(moment * (m - 3) * (m - 5)) == 1  # E[X^-2] = 1/((m - 3)(m - 5)) for every m > 5
    # phi - 1 = (6m - 15)/((m-3)(m-5)) > 0 and phi' = -(6m^2 - 30m + 30)/((m-3)^2 (m-5)^2) < 0 for m > 5
    assert sp.simplify(phi - 1 - (6 * m - 15) / ((m - 3) * (m - 5))) == 0
    assert sp.simplify(sp.diff(phi, m) + (6 * m**2 - 30 * m + 30) / ((m - 3) ** 2 * (m - 5) ** 2)) == 0
    roots = sp.solve(6 * m**2 - 30 * m + 30, m)
    assert all(r < 5 for r in roots)  # the numerator of -phi' is positive beyond its larger root (< 5)
    for d in (64, 256, 1024):
        one = predicted_nonlinearity(d, 1)
        for groups in (2, 4, 8, 16):
            if d // groups >= 6:
                h = predicted_nonlinearity(d, groups)
                assert h >= 3 * groups and h / one >= groups


def test_predicted_value_matches_monte_carlo_of_the_closed_form():
    """The theorem's expectation against 100 000 Gaussian inputs (with a non-zero, group-constant mean)
    pushed through the per-point closed form; group sizes m >= 12 (finite variance), 5 standard errors."""
    for d, groups in [(64, 1), (64, 4), (96, 8), (128, 2)]:
        m = d // groups
        mu = torch.repeat_interleave(torch.linspace(-3, 3, groups, dtype=torch.float64), m)
        x = 2.0 * _gauss(100_000, d, seed=d + groups) + mu
        vals = 4.0**2 * ln_g_hessian_sq_norms(x, groups, eps=0.0)  # s^2 = sigma^2 = 4
        mean, se = _mean_and_se(vals)
        pred = predicted_nonlinearity(d, groups)
        assert abs(mean - pred) < 5 * se, (d, groups, mean, pred, se)


def test_jacobian_yardstick_sympy_and_exact():
    """The first-derivative yardstick after the growth theorem, exactly: E[1/X] = 1/(k-2) for X ~ chi^2_k from the
    density (sympy, k = 1..12, divergent for k <= 2); G m (m-2) E[1/chi^2_{m-1}] = d(m-2)/(m-3) for m >= 4, infinite at
    m = 3, 0 at m = 2; H / (s^2 E||J||_F^2) = 3/(m-5) for m >= 6 (symbolic in m). Per input, ||J||_F^2 of LN-G at
    eps = 0 is sum_g m(m-2)/rho_g^2, against torch.func.jacrev to relative 1e-12."""
    t = sp.symbols("t", positive=True)
    for k in range(1, 13):
        density = t ** sp.Rational(k, 2) / t * sp.exp(-t / 2) / (2 ** sp.Rational(k, 2) * sp.gamma(sp.Rational(k, 2)))
        moment = sp.integrate(density / t, (t, 0, sp.oo))
        if k <= 2:
            assert moment == sp.oo and chi2_inverse_mean(k) == math.inf
        else:
            assert sp.simplify(moment - sp.Rational(1, k - 2)) == 0
            assert chi2_inverse_mean(k) == pytest.approx(1 / (k - 2), rel=1e-15)
    for d in (12, 64, 96, 256):
        for groups in range(1, d // 2 + 1):
            if d % groups:
                continue
            m = d // groups
            value = predicted_jacobian_sq_norm(d, groups)
            if m == 2:
                assert value == 0.0
            elif m == 3:
                assert value == math.inf
            else:
                exact = sp.Rational(groups * m * (m - 2), 1) * sp.Rational(1, m - 3)  # G m (m-2) E[1/chi^2_{m-1}]
                assert exact == sp.Rational(d * (m - 2), m - 3) and d <= exact <= 2 * d
                assert value == pytest.approx(float(exact), rel=1e-15), (d, groups)
                if m >= 6:
                    assert predicted_nonlinearity(d, groups) / value == pytest.approx(3 / (m - 5), rel=1e-13)
    m = sp.symbols("m", positive=True)
    quotient = (3 * m * (m - 2) / ((m - 3) * (m - 5))) / (m * (m - 2) / (m - 3))  # per group: H over the yardstick
    assert sp.simplify(quotient - 3 / (m - 5)) == 0
    # per input: ||J||_F^2 = sum_g m (m-2) / rho_g^2, rho_g = |P_m x_g| (J_g = sqrt(m)/rho_g times a rank m-2 projection)
    for d, groups in [(6, 1), (12, 2), (12, 3), (16, 4), (64, 4)]:
        m = d // groups
        x = _gauss(5, d, seed=7 * d + groups) * 3 + 1
        jac = torch.vmap(torch.func.jacrev(group_ln_map(groups, eps=0.0)))(x)
        rho2 = (x.view(5, groups, m) - x.view(5, groups, m).mean(-1, keepdim=True)).pow(2).sum(-1)
        closed = (m * (m - 2) / rho2).sum(-1)
        assert torch.allclose(jac.pow(2).sum((-2, -1)), closed, rtol=1e-12, atol=0), (d, groups)


@pytest.mark.parametrize("groups", [1, 4])
def test_jacobian_yardstick_matches_monte_carlo(groups):
    """s^2 E||J||_F^2 = d(m-2)/(m-3) at d = 64 (m = 64 and 16) against 16 000 Gaussian inputs with a non-zero,
    group-constant mean and sigma = 2 (seed 5151), Jacobians from torch.func.jacrev (not the closed form), within
    5 standard errors. The tolerance resolves a wrong constant: (m-1)/(m-3) in place of (m-2)/(m-3), a change of
    1/(m-2) of the value, lies more than 10 standard errors away (asserted)."""
    d, n, sigma = 64, 16_000, 2.0
    m = d // groups
    mu = torch.repeat_interleave(torch.linspace(-2, 2, groups, dtype=torch.float64), m)
    x = sigma * _gauss(n, d, seed=5151) + mu
    f = torch.vmap(torch.func.jacrev(group_ln_map(groups, eps=0.0)))
    vals = sigma**2 * torch.cat([f(chunk).pow(2).sum((-2, -1)) for chunk in x.split(2000)])
    mean, se = _mean_and_se(vals)
    pred = predicted_jacobian_sq_norm(d, groups)
    assert abs(mean - pred) < 5 * se, (groups, mean, pred, se)
    assert abs(d * (m - 1) / (m - 3) - pred) > 10 * se  # the resolution claimed above


_MEASURED_CASES = [(d, groups) for d in (64, 128, 256) for groups in sorted({1, 2, 4, d // 16})]  # d // 16 = 4 at d = 64


@pytest.mark.parametrize("d,groups", _MEASURED_CASES)
def test_measured_curve_matches_prediction(d, groups):
    """The book's measurement route (torch.func Hessian-vector probes, vmapped; s^2 estimated from the
    samples) at eps = 1e-5 against the theorem's eps = 0 closed form 3d(m-2)/((m-3)(m-5)) for
    d = 64, 128, 256 and group sizes m >= 16, within 5 standard errors; the eps = 1e-5 quadrature
    differs from the closed form by less than 0.05 standard errors there, and agrees too. Each case has
    its own probe generator, so the cases at one width are independent checks (the default generator
    would give them the same probes).

    What it resolves: a relative error of the closed form is caught for certain once it exceeds 5 standard
    errors plus the measurement's own deviation (itself under 5 standard errors here). For m = 16 the samples are
    6000 * 256 / d (24000, 12000, 6000; a few seconds together), so that 10 standard errors stay below
    1/(m - 2) = 1/14 of the measured value, about the change that 1/((k-1)(k-4)) in place of 1/((k-2)(k-4))
    (k = m - 1) makes: each m = 16 case catches that plant by itself (the resolution is asserted below). With m >= 32
    the same plant moves the value by 1/(m - 2) <= 1/30, which 4000 samples (5 standard errors = about 4% to 8% of
    the value) do not resolve by the measurement; those cases still catch it through the cross-check of the closed
    form against the independent quadrature below (|quadrature - closed| < 0.05 standard errors)."""
    m = d // groups
    n = 6000 * 256 // d if m == 16 else 4000
    x = _gauss(n, d, seed=1000 + d + groups)
    probes = torch.Generator().manual_seed(2000 + d + groups)
    h = hessian_nonlinearity(group_ln_map(groups, 1e-5), x, method="probe", generator=probes)
    closed = predicted_nonlinearity(d, groups)  # eps = 0: the theorem's closed form
    if m == 16:  # the resolution claimed above: a shift of 1/(m - 2) of the value is over 10 standard errors
        assert 10 * h.stderr < h.value / (m - 2), (d, groups, h.stderr, h.value)
    assert abs(h.value - closed) < 5 * h.stderr, (d, groups, h.value, closed, h.stderr)
    quadrature = predicted_nonlinearity(d, groups, eps=1e-5, sigma2=h.scale)
    assert abs(quadrature - closed) < 0.05 * h.stderr, (d, groups, quadrature, closed)
    assert abs(h.value - quadrature) < 5 * h.stderr, (d, groups, h.value, quadrature, h.stderr)


def test_small_groups():
    """m = 2: zero Hessian almost everywhere at eps = 0 (a sign per group); m = 3, 4, 5: infinite;
    with eps > 0 everything is finite and the blow-up rates are eps^-3/2, eps^-1, eps^-1/2, log(1/eps)."""
    assert predicted_nonlinearity(64, 32) == 0.0
    assert predicted_nonlinearity(64, 1) == pytest.approx(11904 / 3599, rel=1e-14)  # exercise: 3*64*62/(61*59)
    assert all(predicted_nonlinearity(d, g) == math.inf for d, g in [(63, 21), (64, 16), (60, 12)])
    x = _gauss(20, 8, seed=4)
    assert float(hessian_sq_norms(group_ln_map(4, 0.0), x).abs().max()) < 1e-12  # rounding only; m = 3 gives O(10)
    for d, g, slope in [(64, 32, -1.5), (63, 21, -1.0), (64, 16, -0.5)]:
        a, b = predicted_nonlinearity(d, g, eps=1e-10), predicted_nonlinearity(d, g, eps=1e-12)
        assert math.log10(b / a) / -2 == pytest.approx(slope, abs=0.01)
    h = [predicted_nonlinearity(60, 12, eps=10.0**-e) for e in (8, 10, 12)]
    assert h[2] - h[1] == pytest.approx(h[1] - h[0], rel=0.01) and h[2] > h[1] > h[0]


def test_quadrature_limits():
    """eps -> 0 recovers the closed form (m >= 6); eps > 0 agrees with a Monte Carlo of the closed form."""
    for d, g in [(64, 1), (64, 8), (56, 7)]:
        assert predicted_nonlinearity(d, g, eps=1e-13) == pytest.approx(predicted_nonlinearity(d, g), rel=1e-6)
    # m = 6 converges like eps^(1/2) (the chi^2_5 density ~ t^(3/2) meets the t^-2 of the norm)
    gap = [1 - predicted_nonlinearity(48, 8, eps=e) / predicted_nonlinearity(48, 8) for e in (1e-11, 1e-13)]
    assert gap[0] / gap[1] == pytest.approx(10.0, rel=0.02)
    for d, g, eps in [(8, 4, 0.5), (16, 8, 0.05), (12, 2, 0.2)]:
        x = _gauss(100_000, d, seed=d)
        mean, se = _mean_and_se(ln_g_hessian_sq_norms(x, g, eps))
        assert abs(mean - predicted_nonlinearity(d, g, eps=eps)) < 5 * se
    # only eps / sigma^2 matters
    assert predicted_nonlinearity(32, 4, eps=0.1, sigma2=2.0) == pytest.approx(predicted_nonlinearity(32, 4, eps=0.05), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(3, 12),
    rho=st.floats(1e-3, 1e3),
    eps=st.floats(1e-8, 10.0),
)
def test_eps_only_lowers_the_hessian_for_groups_of_three_or_more(m, rho, eps):
    """Per point, ||H_eps||_F^2 / ||H_0||_F^2 = (1-q)^3 (1 + 3q^2/(m-2)) <= 1 with q = m eps / r^2."""
    from lnbook.core.derivatives import layer_norm_hessian_frobenius

    with_eps = float(layer_norm_hessian_frobenius(m, rho, eps)) ** 2
    without = float(layer_norm_hessian_frobenius(m, rho, 0.0)) ** 2
    q = m * eps / (rho**2 + m * eps)
    assert with_eps <= without * (1 + 1e-12)
    assert with_eps / without == pytest.approx((1 - q) ** 3 * (1 + 3 * q**2 / (m - 2)), rel=1e-9, abs=1e-300)


def test_eps_ratio_bound_sympy():
    """(1-q)^3 (1 + 3 q^2) has derivative (1-q)^2 (-15 q^2 + 6 q - 3) < 0, so it falls from 1 at q = 0."""
    q = sp.symbols("q", real=True)
    f = (1 - q) ** 3 * (1 + 3 * q**2)
    assert sp.expand(sp.diff(f, q) - (1 - q) ** 2 * (-15 * q**2 + 6 * q - 3)) == 0
    assert sp.discriminant(-15 * q**2 + 6 * q - 3, q) < 0 and f.subs(q, 0) == 1


def test_bad_input_gets_a_clear_error():
    x = _gauss(4, 12, seed=0)
    with pytest.raises(ValueError, match="does not divide the width d=12"):
        ln_g_hessian_sq_norms(x, 5)
    with pytest.raises(ValueError, match="does not divide the width d=12"):
        predicted_nonlinearity(12, 5)
    with pytest.raises(ValueError, match="use groups <= 6"):
        predicted_nonlinearity(12, 12)
    with pytest.raises(ValueError, match="method must be one of"):
        hessian_nonlinearity(group_ln_map(2), x, method="hutchinson")
    with pytest.raises(ValueError, match="scale"):
        hessian_nonlinearity(group_ln_map(2), x, scale=-1.0)
    with pytest.raises(ValueError, match="at least 2 dimension"):
        hessian_nonlinearity(group_ln_map(2), x[0])
    with pytest.raises(ValueError, match="at least 2 samples"):
        input_scale(x[:1])
    with pytest.raises(ValueError, match="non-finite"):
        hessian_nonlinearity(group_ln_map(2), torch.full((2, 12), float("nan"), dtype=torch.float64))
    # eps = 0 at an input that is constant on a group: not differentiable there, said so
    const = torch.cat([torch.ones(3, 6), _gauss(3, 6, seed=1)], dim=1).double()
    with pytest.raises(ValueError, match="not twice differentiable"):
        hessian_nonlinearity(group_ln_map(2, 0.0), const, scale=1.0)
    with pytest.raises(ValueError, match="sigma2"):
        predicted_nonlinearity(12, 2, eps=0.1, sigma2=0.0)


def test_readout_bias_factor_is_a_third_of_the_squared_norm():
    """The exercise: with the read-out u equal to the centred input z, ||Hess(u^T LN)(x)||_F^2 is
    ||z||^2 / 3 times the exact sum of squares (eps = 0), for widths 8 to 256 and inputs of any scale."""
    f = group_ln_map(1, 0.0)
    for d, seed in [(8, 0), (16, 1), (64, 2), (256, 3)]:
        x = _gauss(1, d, seed=seed)[0] * (1 + seed) + 0.7
        z = x - x.mean()
        exact = float(hessian_sq_norms(f, x[None]).mean())
        aligned = float(torch.func.hessian(lambda v: (f(v) * z).sum())(x).pow(2).sum())
        assert aligned / exact == pytest.approx(float(z.pow(2).sum()) / 3, rel=1e-9), d
    # small inputs (||z||^2 < 3): the same factor, now below 1, an underestimate (the solution says both)
    x = _gauss(1, 64, seed=4)[0] * 0.1
    z = x - x.mean()
    exact = float(hessian_sq_norms(f, x[None]).mean())
    aligned = float(torch.func.hessian(lambda v: (f(v) * z).sum())(x).pow(2).sum())
    assert aligned / exact == pytest.approx(float(z.pow(2).sum()) / 3, rel=1e-9) and aligned / exact < 1


def test_readouts_equal_to_the_inputs_average_to_d_minus_5_over_3_times_h():
    """Referee 8 of chapter 5, finding 1: averaged over N(0, I_d) inputs the factor ||z||^2/3 is not ~(d-1)/3, because it
    is correlated with the 1/r^4 term that carries the mean: at eps = 0 the mean aligned estimate is (d-5)/3 times H
    (d(d-2)/(d-3) against 3d(d-2)/((d-3)(d-5))), too low up to d = 7 and too high from d = 9. Monte Carlo, 4000 inputs,
    at d = 12 and 16 (where the estimate has a finite variance), within 6%; a per-input factor (d-1)/3 is far off."""
    f = group_ln_map(1, 0.0)
    for d in (12, 16):
        x = _gauss(4000, d, seed=7)
        z = x - x.mean(-1, keepdim=True)
        exact = hessian_sq_norms(f, x)
        aligned = torch.func.vmap(lambda v, zz: torch.func.hessian(lambda w: (f(w[None])[0] * zz).sum())(v).pow(2).sum())(x, z)
        ratio = float(aligned.mean() / exact.mean())
        assert ratio == pytest.approx((d - 5) / 3, rel=0.06), d
        assert abs(ratio - (d - 1) / 3) > 0.15 * (d - 1) / 3  # the naive per-input reading


def test_relu_networks_have_zero_h_but_are_not_affine():
    """Proposition (item 1) needs C^2: a ReLU MLP is piecewise affine, so its Hessian is 0 wherever it exists
    and H = 0, yet it is not affine (its values at x, y and (x + y)/2 violate midpoint affinity)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 3)).double()
    x = _gauss(40, 8, seed=5)
    assert float(hessian_sq_norms(net, x).max()) < 1e-24
    assert hessian_nonlinearity(net, x).value < 1e-20
    a, b = x[:20], x[20:]
    gap = (net((a + b) / 2) - (net(a) + net(b)) / 2).abs().max()
    assert float(gap) > 1e-2  # not affine
    # a smooth map (LN-G) with the same inputs has H > 0
    assert hessian_nonlinearity(group_ln_map(2, 1e-5), x).value > 1.0


@pytest.mark.parametrize("d, groups", [(64, 4), (60, 5), (96, 6)])
def test_layer_norm_with_a_non_constant_mean_is_below_the_centred_value(d, groups):
    """The theorem's mean c is constant on each group, not necessarily on the whole vector. Then LN's
    ||P x||^2 / sigma^2 is non-central chi-square and its H lies below the centred value 3 phi(d), while
    LN-G's equals 3 G phi(m): so H(LN-G) >= G H(LN). Monte Carlo of the closed form, 1e5 inputs, at
    (d, G) = (64, 4), (60, 5), (96, 6) (m = 16, 12, 16), group means spread evenly over [-3, 3]; the gap
    is many standard errors."""
    mu = torch.repeat_interleave(torch.linspace(-3.0, 3.0, groups, dtype=torch.float64), d // groups)
    x = _gauss(100_000, d, seed=11 + d + groups) + mu
    ln_mean, ln_se = _mean_and_se(ln_g_hessian_sq_norms(x, 1, eps=0.0))
    lng_mean, lng_se = _mean_and_se(ln_g_hessian_sq_norms(x, groups, eps=0.0))
    centred = predicted_nonlinearity(d, 1)
    assert ln_mean + 10 * ln_se < centred  # strictly below the centred value
    assert abs(lng_mean - predicted_nonlinearity(d, groups)) < 5 * lng_se
    assert lng_mean - 5 * lng_se > groups * ln_mean


def test_at_least_g_times_layer_norm_needs_groups_of_three():
    """The theorem's 'in particular': H(LN-G with G groups) >= G H(LN) on centred isotropic Gaussians for
    every group size m >= 3 (infinite for m = 3, 4, 5), at widths 6 to 64 and every G dividing d; for
    m = 2 and G >= 2 it fails (H(LN-G) = 0 < H(LN), infinite at d = 4); at d = 2 (G = 1, m = 2) LN-G is
    LayerNorm and both are 0, so the bound holds with equality."""
    assert predicted_nonlinearity(2, 1) == 0.0 >= 1 * predicted_nonlinearity(2, 1)  # d = 2: LN-G is LN, holds
    assert predicted_nonlinearity(4, 1) == math.inf and predicted_nonlinearity(4, 2) == 0.0  # d = 4, G = 2: fails
    assert not predicted_nonlinearity(4, 2) >= 2 * predicted_nonlinearity(4, 1)
    for d in range(6, 65):
        ln = predicted_nonlinearity(d, 1)
        assert 0 < ln < math.inf
        for g in (g for g in range(2, d + 1) if d % g == 0 and d // g >= 3):
            assert predicted_nonlinearity(d, g) >= g * ln, (d, g)
        if d % 2 == 0:
            assert predicted_nonlinearity(d, d // 2) == 0.0 < (d // 2) * ln


def test_groups_of_two_have_the_largest_h_at_positive_eps_at_width_16():
    """Chapter 5's LSSR section, width 16 and G = 1, 2, 4, 8: at eps = 0 groups of two have H = 0, the
    smallest of the four; at eps = 1e-5 (where the random-label means are taken) they have the largest,
    and it grows like eps^-3/2 (slope checked between 1e-5 and 1e-7)."""
    at_zero = [predicted_nonlinearity(16, g) for g in (1, 2, 4, 8)]
    assert at_zero[3] == 0.0 < min(at_zero[:3])
    at_eps = [predicted_nonlinearity(16, g, eps=1e-5) for g in (1, 2, 4, 8)]
    assert at_eps[3] > max(at_eps[:3]), at_eps
    slope = math.log10(predicted_nonlinearity(16, 8, eps=1e-7) / at_eps[3]) / -2
    assert slope == pytest.approx(-1.5, abs=0.01)


def test_groups_of_two_after_a_random_linear_map_largest_mean_smallest_median():
    """Chapter 5's LSSR section: the layers there see Wx + c with x ~ N(0, I_4) (rank-4 covariance, a mean
    not constant on groups), not isotropic inputs. For five such layers (width 16, eps = 1e-5, 20,000
    inputs each) groups of two still have the largest mean of s^4 sum ||Hess||_F^2 of G = 1, 2, 4, 8, but
    the smallest median: the mean is carried by the rare inputs inside the sign's window."""
    g = torch.Generator().manual_seed(5)
    for _ in range(5):
        W = torch.randn(16, 4, generator=g, dtype=torch.float64)
        c = torch.randn(16, generator=g, dtype=torch.float64)
        z = torch.randn(20_000, 4, generator=g, dtype=torch.float64) @ W.T + c
        per_input = [input_scale(z) ** 2 * ln_g_hessian_sq_norms(z, G, 1e-5) for G in (1, 2, 4, 8)]
        means = [float(v.mean()) for v in per_input]
        medians = [float(v.median()) for v in per_input]
        assert means[3] > 100 * max(means[:3]), means
        assert medians[3] < 0.1 * min(medians[:3]), medians


def test_default_probe_generator_is_fixed_and_a_passed_one_is_used():
    """As documented (and as chapter 5 says): without a generator, calls with the same shapes draw the same probes
    and read-outs, those of a generator seeded 20240601 (deterministic, and correlated between calls); distinct
    generators give distinct draws."""
    f = group_ln_map(2, 1e-5)
    x = _gauss(50, 8, seed=11)
    for estimate in (probe_hessian_sq_norms, readout_hessian_sq_norms):
        torch.testing.assert_close(estimate(f, x), estimate(f, x), rtol=0, atol=0)
        torch.testing.assert_close(estimate(f, x), estimate(f, x, generator=torch.Generator().manual_seed(20240601)),
                                   rtol=0, atol=0)
        a = estimate(f, x, generator=torch.Generator().manual_seed(1))
        b = estimate(f, x, generator=torch.Generator().manual_seed(2))
        assert not torch.equal(a, b) and not torch.equal(a, estimate(f, x))


@pytest.mark.parametrize("m", [8192, 24576, 32768, 65536, 2**20])
def test_the_eps_quadrature_finds_the_chi_square_peak_of_large_groups(m):
    """For eps > 0 the prediction is a quadrature over the chi-square density of rho^2, a peak of width about
    sqrt(2/k) in log rho^2; for large groups quad used to miss it and return values 1e-20 too small (a referee's
    (65536, 1, 1e-5): 7.1e-21 instead of about 3.0). As eps -> 0 the value must tend to the eps = 0 closed form
    3d(m-2)/((m-3)(m-5)): at eps = 1e-12 within 1e-6 relative (the eps term moves it by about m eps / k, far below),
    and at eps = 1e-5 the value lies below the closed form by at most 1e-3 relative (eps only lowers each group's
    Hessian here: q^2 is about (m eps / rho^2)^2 and r^2 grows). Planted: the old subintervals -> all five fail."""
    import warnings

    exact = predicted_nonlinearity(m, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quad may report roundoff on the far tails, where the integrand is ~0
        tiny, small = predicted_nonlinearity(m, 1, 1e-12), predicted_nonlinearity(m, 1, 1e-5)
    assert abs(tiny - exact) <= 1e-6 * exact
    assert exact * (1 - 1e-3) <= small <= exact


def test_the_measure_scales_with_the_output_squared():
    """prop-ch5-h-properties (4): H(c f) = c^2 H(f), and H(A f + b) depends on A: the measure is in the output's units
    (a read-out ten times larger multiplies it by 100 with the same curvature of the level sets), so maps are compared
    at equal output scale (fifth read of chapter 5)."""
    x = _gauss(40, 8, seed=3)
    f = group_ln_map(2, 1e-5)
    h = hessian_nonlinearity(f, x).value
    assert hessian_nonlinearity(lambda v: 10.0 * f(v) + 3.0, x).value == pytest.approx(100.0 * h, rel=1e-9)
    A = torch.diag(torch.tensor([1.0, 2.0] + [1.0] * 6, dtype=torch.float64))
    assert hessian_nonlinearity(lambda v: f(v) @ A.T, x).value > 1.01 * h


def _direct_predicted_nonlinearity(d, groups, eps):
    """The quadrature as the module had it before (integrand m t / r2^3 (9 q^2 + 3(m - 2)) times the density, in
    plain floats, sigma2 = 1): the reference for ordinary ratios, where it is representable."""
    from scipy.integrate import quad

    m, k, e = d // groups, d // groups - 1, eps
    log_norm = -(k / 2) * math.log(2.0) - math.lgamma(k / 2)

    def integrand(s):
        t = math.exp(s)
        r2 = t + m * e
        q = m * e / r2
        return m * t / r2**3 * (9.0 * q * q + 3.0 * (m - 2)) * math.exp((k / 2) * s - t / 2 + log_norm)

    pivot, top = math.log(m * e), math.log(k + 40.0 * math.sqrt(k) + 200.0)
    lo = min(pivot, top) - 40.0
    peak, half = math.log(k), 10.0 * math.sqrt(2.0 / k)
    pieces = sorted({lo, min(pivot, top), top} | {c for c in (peak - half, peak, peak + half) if lo < c < top})
    return groups * sum(quad(integrand, a, b, limit=400, epsabs=0.0, epsrel=1e-10)[0] for a, b in zip(pieces, pieces[1:]))


def test_the_eps_quadrature_is_unchanged_for_ordinary_ratios():
    # the log-space integrand (scaled by its largest grid value) gives the direct form's numbers to 1e-12 relative
    for d, g in [(12, 2), (64, 32), (63, 21), (64, 16), (60, 12), (48, 8), (64, 1), (16, 8), (8, 4), (1024, 1)]:
        for eps in (1e-13, 1e-5, 0.2, 10.0, 1e3):
            assert predicted_nonlinearity(d, g, eps) == pytest.approx(_direct_predicted_nonlinearity(d, g, eps), rel=1e-12)


def test_tiny_and_huge_eps_ratios_give_the_limits_or_refuse():
    """scratch6_ch5/zd.py: the direct integrand divided by r2^3 = 0 (ZeroDivisionError) once m eps / sigma^2 is below
    about 1e-108 at the quadrature's lower end. Now: m = 6 gives the eps = 0 value 3 * 12 * 4 / (3 * 1) = 48 (the
    gap is O((eps/sigma^2)^(1/2)), 1e-75 here); m = 2 follows its eps^(-3/2) law; a huge ratio the large-eps law
    G m k (3m + 3) / (m e)^3 (r^2 -> m e, q -> 1, E t = k); a value beyond the largest float is refused."""
    with pytest.raises(ZeroDivisionError):
        _direct_predicted_nonlinearity(12, 2, 1e-150)  # the old failure, kept as the reason for this test
    assert predicted_nonlinearity(12, 2) == 48.0
    for eps, sigma2 in [(1e-150, 1.0), (1e-300, 1.0), (5e-324, 1.0), (1e-5, 1e150), (1e-5, 1e300)]:
        assert predicted_nonlinearity(12, 2, eps, sigma2) == pytest.approx(48.0, rel=1e-9), (eps, sigma2)
    assert predicted_nonlinearity(60, 6, 1e-200) == pytest.approx(predicted_nonlinearity(60, 6), rel=1e-9)  # m = 10
    # m = 2: H ~ C eps^(-3/2) (tests above: slope -1.5), corrections O(eps); C from a ratio the direct form handles
    c = predicted_nonlinearity(64, 32, 1e-40) * 1e-60
    for eps in (1e-100, 1e-200):
        assert predicted_nonlinearity(64, 32, eps) == pytest.approx(c * eps**-1.5, rel=1e-8), eps
    # m = 3: H ~ C eps^(-1)
    c = predicted_nonlinearity(63, 21, 1e-40) * 1e-40
    assert predicted_nonlinearity(63, 21, 1e-300) == pytest.approx(c * 1e300, rel=1e-8)
    for d, g, eps in [(12, 2, 1e100), (64, 32, 1e90), (60, 12, 1e80)]:  # the direct form overflows r2^3 past 1e103
        m = d // g
        law = math.exp(math.log(g * m * (m - 1) * (3 * m + 3)) - 3 * math.log(m * eps))
        assert predicted_nonlinearity(d, g, eps) == pytest.approx(law, rel=1e-9), (d, g, eps)
    assert predicted_nonlinearity(12, 2, 1e300, sigma2=1e-300) == 0.0  # 1e-1800 rounds to 0
    with pytest.raises(ValueError, match="beyond the largest float"):
        predicted_nonlinearity(64, 32, 5e-324)
    with pytest.raises(ValueError, match="out of range"):
        predicted_nonlinearity(63, 21, 1e-5, sigma2=1e305)


def test_every_estimator_measures_a_transformer_block_with_attention():
    """Attention's fused CPU kernel has no forward-mode derivative; the estimators run attention on its math
    backend, so a block of the book's TinyTransformer (LN-G, 4 groups) is measured by all three methods, and they
    agree within their sampling error (before: NotImplementedError from forward AD through flash attention)."""
    from lnbook.ml.models import TinyTransformer

    torch.manual_seed(0)
    block = TinyTransformer(8, 16, 2, 1, max_len=6, norm="lng", groups=4).double().eval().blocks[0]
    x = torch.randn(8, 6, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    exact = hessian_nonlinearity(block, x)
    assert math.isfinite(exact.value) and exact.value > 0
    for method in ("readout", "probe"):
        est = hessian_nonlinearity(block, x, method=method, probes=16, generator=torch.Generator().manual_seed(2))
        assert abs(est.value - exact.value) < 4 * math.hypot(est.stderr, exact.stderr), method


def test_read_outs_and_probes_equal_to_the_inputs_are_refused():
    """Referee 8 of chapter 5, finding 2: inputs drawn with torch.randn from the default seed 20240601 made the default
    read-outs (and probes' u) equal to the inputs, and the estimate about 20 times too large with a normal-looking
    standard error (65.1 against 3.33 for LN at d = 64). Both estimators now refuse such draws with the reason; the same
    inputs with another generator run."""
    f = group_ln_map(1, 0.0)
    x = torch.randn(400, 64, generator=torch.Generator().manual_seed(20240601), dtype=torch.float64)
    with pytest.raises(ValueError, match="read-outs drawn are the inputs"):
        readout_hessian_sq_norms(f, x)
    with pytest.raises(ValueError, match="read-outs drawn are the inputs"):
        probe_hessian_sq_norms(f, x)
    with pytest.raises(ValueError, match="inputs themselves"):
        hessian_nonlinearity(f, x, method="readout")
    other = torch.Generator().manual_seed(5)
    assert float(readout_hessian_sq_norms(f, x[:50], generator=other).mean()) > 0


def test_inputs_drawn_with_the_read_out_seed_and_scaled_are_refused():
    """The refusal above also holds when the inputs are those draws times a scale (x = 3 randn with the same seed)."""
    f = group_ln_map(1, 0.0)
    x = 3.0 * torch.randn(100, 16, generator=torch.Generator().manual_seed(20240601), dtype=torch.float64)
    with pytest.raises(ValueError, match="up to one common scale"):
        readout_hessian_sq_norms(f, x)


def test_draws_parallel_by_chance_are_not_refused():
    """Referee 9 of chapter 5, finding 1: the refusal judged a draw parallel to its sample (|cos| > 0.999) as a copy of
    the inputs, so inputs of one dimension (every draw parallel) were always refused, and a single input of two
    dimensions for 26 of 400 generator seeds. A copy is now the inputs times one common scale: inputs of one dimension
    run with either estimator, and a single 2-D input runs for every one of 400 seeds."""
    f = torch.tanh
    x = torch.randn(200, 1, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for method in ("readout", "probe"):
        est = hessian_nonlinearity(f, x, method=method, generator=torch.Generator().manual_seed(3))
        assert math.isfinite(est.value) and est.value > 0
    exact = hessian_sq_norms(f, x).mean()
    assert abs(float(readout_hessian_sq_norms(f, x, readouts=1, generator=torch.Generator().manual_seed(3)).mean())
               - float(exact)) < 0.5 * float(exact)
    one = torch.randn(1, 2, generator=torch.Generator().manual_seed(10**6), dtype=torch.float64)  # not among the seeds
    for seed in range(400):
        readout_hessian_sq_norms(f, one, generator=torch.Generator().manual_seed(seed))


def test_inputs_drawn_with_the_read_out_seed_and_shifted_are_refused():
    """Referee 10 of chapter 5, finding 1: inputs drawn with the default read-out seed and then shifted (the lab's own
    pattern 1.5 x + 0.3, or x + 0.01) passed the refusal, which fitted one common scale only, and the estimate was 65.07
    against the true 3.31 for LN at d = 64, with no warning; LayerNorm forgets the shift, so the bias survives it. Shifts
    by one number, by one number per sample, and a scale and shift per feature (standardised inputs) are now refused, by
    both estimators; the same inputs with another generator run and give the predicted value."""
    f = group_ln_map(1, 0.0)
    x = torch.randn(400, 64, generator=torch.Generator().manual_seed(20240601), dtype=torch.float64)
    per_sample = torch.linspace(-1.0, 2.0, 400, dtype=torch.float64)[:, None]
    per_feature = torch.linspace(0.5, 3.0, 64, dtype=torch.float64), torch.linspace(-2.0, 1.0, 64, dtype=torch.float64)
    for shifted in (1.5 * x + 0.3, x + 0.01, 2.0 * x + per_sample, per_feature[0] * x + per_feature[1]):
        with pytest.raises(ValueError, match="inputs themselves"):
            hessian_nonlinearity(f, shifted, method="readout")
        with pytest.raises(ValueError, match="inputs themselves"):
            probe_hessian_sq_norms(f, shifted[:50])
    est = hessian_nonlinearity(f, 1.5 * x + 0.3, method="readout", generator=torch.Generator().manual_seed(7))
    truth = predicted_nonlinearity(64, 1)
    assert abs(est.value - truth) < 4 * est.stderr
    # referee 13 of chapter 5, finding 6: below four dimensions the per-sample angle test does not run, and the
    # centred common-scale test is the only guard against a shift of each sample (deleted, d = 2 and 3 passed)
    for d in (2, 3):
        xs = torch.randn(400, d, generator=torch.Generator().manual_seed(20240601), dtype=torch.float64)
        for shifted in (1.5 * xs + per_sample, 1.5 * xs + 0.3):
            with pytest.raises(ValueError, match="inputs themselves"):
                hessian_nonlinearity(group_ln_map(1, 0.0), shifted, method="readout")


def test_small_inputs_are_not_refused_by_the_shift_tests():
    """The shift tests fit one scale to every centred number, or a line per feature through three or more samples, so
    small random inputs (down to one sample of three dimensions, three samples of one) are not refused by chance."""
    f = torch.tanh
    for shape in ((1, 3), (2, 2), (3, 1), (3, 2), (2, 1), (4, 3), (1, 4), (2, 5)):
        for seed in range(200):
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(10**6 + seed), dtype=torch.float64)
            readout_hessian_sq_norms(f, x, generator=torch.Generator().manual_seed(seed))
            probe_hessian_sq_norms(f, x, generator=torch.Generator().manual_seed(seed))


def test_growth_over_groups_measures_every_number_of_groups_with_its_z(monkeypatch, capsys):
    """The Hessian lab's growth experiment (screenshot read 48, items 4 and 5: its loop and progress bar left the
    lab cell): every G with m = d/G >= 2, z the measured minus the predicted value in standard errors, the same
    measurement as hessian_nonlinearity on the same seeds, and a bar unless LNBOOK_PROGRESS=0."""
    from lnbook.group_ln.hessian_measure import (growth_over_groups, group_ln_map, hessian_nonlinearity,
                                                 predicted_nonlinearity)

    monkeypatch.setenv("LNBOOK_PROGRESS", "0")
    rows = growth_over_groups([8, 16], 40, 1e-5, device="cpu")
    assert [(r["d"], r["G"], r["m"]) for r in rows] == [(8, 1, 8), (8, 2, 4), (8, 4, 2),
                                                         (16, 1, 16), (16, 2, 8), (16, 4, 4), (16, 8, 2)]
    assert capsys.readouterr().err == ""
    r = rows[4]
    x = torch.randn(40, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(10_000 + 16 + 2))
    h = hessian_nonlinearity(group_ln_map(2, 1e-5), x, method="probe", generator=torch.Generator().manual_seed(18))
    assert r["value"] == h.value and r["stderr"] == h.stderr
    assert r["pred"] == predicted_nonlinearity(16, 2, eps=1e-5, sigma2=h.scale)
    assert r["z"] == (r["value"] - r["pred"]) / r["stderr"]
    monkeypatch.delenv("LNBOOK_PROGRESS")
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    growth_over_groups([4], 10, 1e-5, device="cpu")
    assert "d=4" in capsys.readouterr().err
    with pytest.raises(TypeError):
        growth_over_groups([8], 10.0)
    # referee 12 of chapter 5, finding 1: a width that is not a power of two crashed inside unflatten (20) or silently
    # stopped before m = 2 (96: G = 48 never measured); every such width is now refused, saying what to do
    for d in (20, 96, 1, 6):
        with pytest.raises(ValueError, match="power of two.*for each G"):
            growth_over_groups([d], 10, device="cpu", progress=False)


def test_inputs_drawn_with_the_read_out_seed_and_scaled_per_sample_are_refused():
    """Referee 11 of chapter 5, finding 1: inputs drawn with the default read-out seed and then normalised per sample
    (rows to one norm, a random scale per row, rows divided by their largest entry) passed the refusal, and the
    estimate was about 20 times the truth with no warning. A scale (and shift) of each sample is now refused, by both
    estimators; the same inputs with another generator run and give the predicted value."""
    f = group_ln_map(1, 0.0)
    x = torch.randn(400, 64, generator=torch.Generator().manual_seed(20240601), dtype=torch.float64)
    scales = torch.linspace(0.5, 1.5, 400, dtype=torch.float64)[:, None]
    for scaled in (8 * x / x.norm(dim=1, keepdim=True), scales * x, x / x.abs().amax(dim=1, keepdim=True), scales * x + 0.2):
        with pytest.raises(ValueError, match="inputs themselves"):
            hessian_nonlinearity(f, scaled, method="readout")
        with pytest.raises(ValueError, match="inputs themselves"):
            probe_hessian_sq_norms(f, scaled[:50])
    unit = 8 * x / x.norm(dim=1, keepdim=True)  # two independent generators agree (the default one gave 63.0)
    one, two = (hessian_nonlinearity(f, unit, method="readout", generator=torch.Generator().manual_seed(s)) for s in (7, 8))
    assert abs(one.value - two.value) < 4 * (one.stderr ** 2 + two.stderr ** 2) ** 0.5 and one.value < 2 * predicted_nonlinearity(64, 1)


# -- prop-ch5-pointwise-growth: a lower bound at every input, no assumption on the inputs (referee 14, finding 1) --

_WIDTHS_AND_GROUPS = [(d, g) for d in (3, 4, 6, 8, 12, 16, 24, 30, 64) for g in range(1, d // 2 + 1)
                      if d % g == 0 and d // g >= 2]


def _ratio(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Per input, sum ||Hess LN-G_i||^2 / sum ||Hess LN_i||^2 at eps = 0 (formula (1) with G groups and with one)."""
    return ln_g_hessian_sq_norms(x, groups, 0.0) / ln_g_hessian_sq_norms(x, 1, 0.0)


def test_pointwise_growth_bound_algebra_sympy():
    """The proposition's algebra: with d = G m, G^2 (m - 2)/(d - 2) = G (d - 2G)/(d - 2); the factor is at least 1
    exactly when G = 1 or d >= 2G + 2 (for G >= 2: m >= 3), and it is below G for G >= 2; and the chain of the proof,
    3 m (m - 2) G^3 / S^2 against 3 d (d - 2)/rho^4 at rho^2 = S, gives the factor."""
    G, m = sp.symbols("G m", positive=True)
    d = G * m
    factor = G * (d - 2 * G) / (d - 2)
    assert sp.simplify(G**2 * (m - 2) / (d - 2) - factor) == 0
    S = sp.symbols("S", positive=True)
    assert sp.simplify((3 * m * (m - 2) * G**3 / S**2) / (3 * d * (d - 2) / S**2) - factor) == 0
    for dd in range(3, 129):
        for gg in (g for g in range(1, dd + 1) if dd % g == 0 and dd // g >= 2):
            c = pointwise_growth_bound(dd, gg)
            assert c == pytest.approx(float(factor.subs({G: gg, m: sp.Rational(dd, gg)})), rel=1e-15)
            assert (c >= 1) == (gg == 1 or dd >= 2 * gg + 2), (dd, gg)
            assert gg == 1 or c < gg
    for bad in ((2, 1), (5, 2), (8, 8)):
        with pytest.raises(ValueError):
            pointwise_growth_bound(*bad)


@settings(max_examples=200)
@given(case=st.sampled_from(_WIDTHS_AND_GROUPS), seed=st.integers(0, 2**31 - 1),
       log_scales=st.lists(st.floats(-6, 6), min_size=1, max_size=1), shift=st.floats(-1e3, 1e3))
def test_lng_is_at_least_the_bound_times_layer_norm_at_every_input(case, seed, log_scales, shift):
    """prop-ch5-pointwise-growth on random inputs: groups with centred norms spread over up to twelve decades and
    group means far apart; the ratio is never below G (d - 2G)/(d - 2) (relative 1e-9)."""
    d, groups = case
    g = torch.Generator().manual_seed(seed)
    m = d // groups
    x = torch.randn(8, groups, m, dtype=torch.float64, generator=g)
    x = x * torch.logspace(-log_scales[0], log_scales[0], groups, dtype=torch.float64)[None, :, None]
    x = x + shift * torch.randn(8, groups, 1, dtype=torch.float64, generator=g)
    ratio = _ratio(x.reshape(8, d), groups)
    assert bool((ratio >= pointwise_growth_bound(d, groups) * (1 - 1e-9)).all()), (float(ratio.min()), d, groups)


@pytest.mark.parametrize("d,groups", [(6, 2), (8, 2), (12, 3), (16, 4), (30, 10), (64, 16), (12, 6)])
def test_the_pointwise_bound_is_attained_and_no_optimiser_gets_below_it(d, groups):
    """prop-ch5-pointwise-growth is sharp: at an input whose groups have equal means and equal centred norms the
    ratio equals G (d - 2G)/(d - 2) to 1e-12, by formula (1) and by torch.func.hessian of a LayerNorm and an LN-G
    written here at eps = 0; for d <= 16, Nelder-Mead minimising the ratio from 5 random starts never goes below the
    bound (relative 1e-9) and comes within 1e-3 of it."""
    from scipy.optimize import minimize

    c = pointwise_growth_bound(d, groups)
    m = d // groups
    g = torch.Generator().manual_seed(0)
    base = torch.randn(m, dtype=torch.float64, generator=g)
    base = (base - base.mean()) / (base - base.mean()).norm()
    rows = torch.stack([base[torch.randperm(m, generator=g)] for _ in range(groups)]) + 0.7  # equal norms, means
    x = rows.reshape(1, d)
    assert float(_ratio(x, groups)[0]) == pytest.approx(c, rel=1e-12)

    def own_ln(v, k):  # eps = 0, over groups of k
        w = v.reshape(-1, k)
        w = w - w.mean(-1, keepdim=True)
        return (w * math.sqrt(k) / w.norm(dim=-1, keepdim=True)).reshape(-1)

    def sq(f, v):
        return float(torch.func.hessian(f)(v).pow(2).sum())
    by_autodiff = sq(lambda v: own_ln(v, m), x[0]) / sq(lambda v: own_ln(v, d), x[0])
    assert by_autodiff == pytest.approx(c, rel=1e-9)

    if d > 16:  # Nelder-Mead in 30 or 64 dimensions takes a minute: the equality checks above cover these widths
        return
    rng = torch.Generator().manual_seed(1)
    best = math.inf
    for _ in range(5):
        start = torch.randn(d, dtype=torch.float64, generator=rng).numpy()
        res = minimize(lambda v: float(_ratio(torch.as_tensor(v)[None], groups)[0]), start, method="Nelder-Mead",
                       options={"maxiter": 40_000, "maxfev": 40_000, "xatol": 1e-10, "fatol": 1e-13})
        assert res.fun >= c * (1 - 1e-9), (res.fun, c)
        best = min(best, res.fun)
    assert best <= c * (1 + 1e-3), (best, c)


@pytest.mark.parametrize("eps", [1e-5, 1e-2, 1.0])
def test_at_positive_eps_no_positive_pointwise_bound_holds(eps):
    """prop-ch5-pointwise-growth's last sentence: at eps > 0, as every group's centred norm shrinks while the group
    means stay distinct, the ratio of LN-G's summed squared Hessian to LayerNorm's falls below any positive bound
    (here below 1e-3 of the eps = 0 factor at (d, G) = (8, 2) and (16, 4))."""
    for d, groups in ((8, 2), (16, 4)):
        m = d // groups
        g = torch.Generator().manual_seed(3)
        means = torch.arange(groups, dtype=torch.float64).repeat_interleave(m)
        x = (means + 1e-12 * torch.randn(d, dtype=torch.float64, generator=g))[None]
        ratio = float(ln_g_hessian_sq_norms(x, groups, eps)[0] / ln_g_hessian_sq_norms(x, 1, eps)[0])
        assert ratio < 1e-3 * pointwise_growth_bound(d, groups), (eps, d, groups, ratio)
