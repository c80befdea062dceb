"""Tests for lnbook.isometry.gram and lnbook.isometry.mlp_at_init (chapter 4).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from lnbook.isometry import hermite as H
from lnbook.isometry import lab as E
from lnbook.isometry import mlp_at_init as M
from lnbook.isometry.gram import centered_isometry, centring_defect, isometry


def _final_isometries(method, seed, reps=300, **kw):
    g = torch.Generator().manual_seed(seed)
    X0 = M.make_inputs(4, 24, repeats=1, degeneracy=5.0, generator=torch.Generator().manual_seed(99))
    X0 = X0.expand(reps, -1, -1).clone()
    return M.simulate(kw.pop("activation", "relu"), X0, 4, method=method, generator=g, **kw).isometry[:, -1].numpy()


@pytest.mark.parametrize("config", [dict(order="act_norm"), dict(order="norm_act"),
                                    dict(activation="tanh", norm="none", gain=1.3)])
def test_fast_and_reference_samplers_have_the_same_law(config):
    """Two-sample KS test on the final isometry (300 nets each, d = 24, n = 4, 4 layers). The third configuration
    (tanh, no normalisation, gain 1.3) sees the scale of W: without a norm, the size of the pre-activations sets how
    nonlinear tanh is, so a sampler with the wrong weight variance changes the law (test_the_ks_test_has_power)."""
    fast = _final_isometries("fast", 1, **config)
    ref = _final_isometries("reference", 2, **config)
    assert stats.ks_2samp(fast, ref).pvalue > 1e-3
    assert abs(fast.mean() - ref.mean()) < 4 * math.sqrt(fast.var() / len(fast) + ref.var() / len(ref))


def test_the_ks_test_has_power():
    """Negative control: a sampler with the wrong weight variance (gain 1.5, no normalisation) is rejected."""
    ref = _final_isometries("reference", 3, activation="tanh", norm="none")
    wrong = _final_isometries("fast", 4, activation="tanh", norm="none", gain=1.5)
    assert stats.ks_2samp(ref, wrong).pvalue < 1e-6


def test_fast_preactivations_have_the_right_covariance():
    """E[(W X)^T (W X)] / d = gain^2 X^T X / d; the fast factor reproduces it (rank-deficient X too)."""
    g = torch.Generator().manual_seed(5)
    X = torch.randn(30, 3, generator=g, dtype=torch.float64)
    X = torch.cat([X, X[:, :1] + X[:, 1:2]], dim=1)  # rank 3 with n = 4
    Xs = X.expand(20000, -1, -1)
    target = (1.69 * X.T @ X / 30).numpy()
    tolerance = 0.01 * np.abs(target).max()  # 1% of the largest entry: about 5 standard errors of the mean here

    def covariance_error(gain):
        H_ = M._fast_preactivations(Xs, gain, g)
        return np.abs((H_.transpose(-1, -2) @ H_).mean(0).numpy() / 30 - target).max()

    assert covariance_error(1.3) < tolerance
    assert covariance_error(1.3 * math.sqrt(1.02)) > tolerance  # a 2% error in the weight variance is seen


def test_layer_norm_after_activation_follows_the_mean_field_map_and_floor():
    """At d = 1000 the simulated isometry gap follows the mean-field prediction plus the finite-width floor: a shape
    check (rtol 0.35 catches a missing floor, not one off by a factor 2; test_finite_width_floor_from_orthogonal_inputs
    checks the floor's size: both of its ratios, measured over predicted, lie in (1.0, 1.15), so a floor 25% too
    large or 10% too small fails it)."""
    g = torch.Generator().manual_seed(7)
    X0 = M.make_inputs(6, 1000, repeats=1, generator=g).expand(8, -1, -1).clone()
    run = M.simulate("relu", X0, 12, generator=g)
    G0 = run.grams[0, 0].numpy()
    mf = M.mean_field_grams("relu", G0, 12)
    beta = H.nonlinearity_strength("relu")
    pred = -np.log(isometry(mf).numpy()) + M.finite_width_gap_floor(beta, 6, 1000, depth=12)
    sim = run.isometry_gap.mean(0).numpy()
    np.testing.assert_allclose(sim, pred, rtol=0.35, atol=2e-3)
    # mean-field: off-diagonal correlations shrink by beta_0 per layer once small
    rho = M.correlations(mf)[:, 0, 1]
    assert rho[-1] / rho[-2] == pytest.approx(beta, rel=0.01)


def _relu_kappa(rho):
    """Closed form (arc-cosine kernel): E relu(U) relu(V) = (sqrt(1 - rho^2) + (pi - arccos rho) rho) / (2 pi),
    E relu(Z) = 1/sqrt(2 pi), E relu(Z)^2 = 1/2; kappa = Cov / Var."""
    rho = np.clip(rho, -1, 1)
    k = (np.sqrt(1 - rho**2) + (np.pi - np.arccos(rho)) * rho) / (2 * np.pi)
    return (k - 1 / (2 * np.pi)) / (0.5 - 1 / (2 * np.pi))


def _exp_kappa(rho):
    """Closed form: E e^U e^V = e^(1 + rho), E e^Z = e^(1/2), E e^(2Z) = e^2, so kappa = (e^rho - 1) / (e - 1)."""
    return np.expm1(rho) / np.expm1(1.0)


def _tanh_kappa(rho):
    """An independent computation: 2-D Gauss-Hermite (numpy's hermgauss, 120 nodes a side) of E tanh(U) tanh(V) with
    U = Z1, V = rho Z1 + sqrt(1 - rho^2) Z2 (tanh is odd: mean 0)."""
    t, w = np.polynomial.hermite.hermgauss(120)
    z, wz = np.sqrt(2) * t, w / np.sqrt(np.pi)
    rho = np.asarray(rho, dtype=np.float64)
    u = z[:, None]
    v = rho[..., None, None] * z[:, None] + np.sqrt(np.clip(1 - rho[..., None, None] ** 2, 0, None)) * z[None, :]
    cov = np.einsum("i,j,...ij->...", wz, wz, np.tanh(u) * np.tanh(v))
    return cov / (wz @ np.tanh(z) ** 2)


@pytest.mark.parametrize("name,kappa", [("relu", _relu_kappa), ("tanh", _tanh_kappa), ("exp", _exp_kappa)])
def test_mean_field_grams_match_the_one_dimensional_map(name, kappa):
    """Three layers of the mean-field Gram iteration (LayerNorm after the activation, unit-diagonal input) equal
    the closed-form correlation map applied entrywise three times: the arc-cosine kernel for ReLU, (e^rho - 1)/(e - 1)
    for exp, and an independent Gauss-Hermite quadrature for tanh (not the package's nested quadrature)."""
    C0 = np.array([[1.0, 0.8, -0.3], [0.8, 1.0, 0.1], [-0.3, 0.1, 1.0]])
    mf = M.mean_field_grams(name, C0, 3)
    r = C0.copy()
    for layer in range(1, 4):
        r = kappa(r)
        np.testing.assert_allclose(mf[layer], r, atol=1e-6)


def test_without_centering_correlations_stay_away_from_zero():
    """Scaling only: rho_{l+1} >= a_0^2 / E sigma^2 > 0, and for exp they go to 1 (rank collapse)."""
    C0 = np.array([[1.0, 0.0], [0.0, 1.0]])
    mf = M.mean_field_grams("exp", C0, 6, norm="scale")
    rho = M.correlations(mf)[:, 0, 1]
    assert rho[1] == pytest.approx(np.exp(-1.0), abs=1e-6)  # kappa~(0) = a_0^2/E e^{2Z} = e/e^2
    assert np.all(np.diff(rho) > 0)
    np.testing.assert_allclose(rho[1:], np.exp(rho[:-1] - 1), atol=1e-6)  # kappa~(rho) = e^(rho - 1) for exp
    centred = M.correlations(M.mean_field_grams("exp", C0, 6, norm="layer"))[:, 0, 1]
    np.testing.assert_allclose(centred, 0.0, atol=1e-9)


@pytest.mark.parametrize("name", ["tanh", "relu", "sigmoid", "exp"])
def test_mean_field_normalisation_matches_layer_norm_in_the_limit(name):
    """Subtracting c_0 = E sigma(sZ) and dividing by sqrt(Var sigma(sZ)) equals LayerNorm in the mean-field limit
    (unit-diagonal input), for the full normalisation and for the centring alone (scaling by the layer). ReLU,
    sigmoid and exp have c_0 != 0, so a missing or wrong c_0 changes the result (tanh alone could not see it); the
    simulation at d = 1000 agrees too, while the uncentred variant is far off for them."""
    C0 = np.array([[1.0, 0.6, -0.2], [0.6, 1.0, 0.3], [-0.2, 0.3, 1.0]])
    layer = M.mean_field_grams(name, C0, 4, norm="layer")
    for norm in ("meanfield", ("meanfield", "layer")):
        np.testing.assert_allclose(M.mean_field_grams(name, C0, 4, norm=norm), layer, atol=1e-6)
    c0, _ = H.mean_and_variance(name)
    if abs(c0) > 0.1:  # the uncentred map is visibly different: the check above sees c_0
        assert np.abs(M.mean_field_grams(name, C0, 4, norm=("none", "layer")) - layer).max() > 0.05
    X0 = M.make_inputs(3, 1000, repeats=4, degeneracy=3.0, generator=torch.Generator().manual_seed(3))
    sims = {norm: M.simulate(name, X0, 3, norm=norm, generator=torch.Generator().manual_seed(4)).grams[:, -1].numpy()
            for norm in ("layer", "meanfield")}
    mf = M.correlations(sims["meanfield"])
    assert np.abs(mf - M.correlations(sims["layer"])).max() < 0.25
    if abs(c0) > 0.1:
        plain = M.simulate(name, X0, 3, norm=("none", "layer"), generator=torch.Generator().manual_seed(4)).grams[:, -1]
        assert np.abs(M.correlations(plain.numpy()) - mf).max() > 0.4


def test_simulate_shapes_and_several_activations():
    g = torch.Generator().manual_seed(0)
    X0 = M.make_inputs(5, 64, repeats=3, generator=g)
    run = M.simulate(["relu", "tanh", torch.sin], X0, 4, generator=g)
    assert run.grams.shape == (3, 3, 5, 5, 5) and run.isometry.shape == (3, 3, 5)
    assert run.activations[:2] == ["relu", "tanh"]
    one = M.simulate("relu", X0[0], 2, norm=("layer", "none"), generator=g)
    assert one.isometry.shape == (1, 3)
    bn = M.simulate("relu", X0, 3, norm="batch", generator=g)
    assert torch.all(bn.isometry[:, 1:] > 0)
    mf = M.simulate("relu", X0, 3, norm="meanfield", generator=g)
    assert torch.all(torch.isfinite(mf.isometry))


def test_divergence_is_flagged_not_hidden():
    g = torch.Generator().manual_seed(0)
    X0 = M.make_inputs(3, 32, repeats=2, generator=g) * 30
    run = M.simulate("exp", X0, 8, norm="none", gain=3.0, generator=g)
    assert bool(run.diverged.any())
    assert torch.isnan(run.isometry[run.diverged]).all()


@pytest.mark.parametrize("beta0", [0.0, 0.5, 0.7335, 1.0])
def test_finite_width_floor_solves_the_ar1_recursion(beta0):
    """The floor curve is (n - 1)/2 times the solution of v_{l+1} = beta_0^2 v_l + 1/d, v_0 = 0 (iterated here),
    and the floor is its limit (infinite for beta_0 = 1, where v_l = l/d grows without bound)."""
    n, d, depth = 10, 100, 400
    v = [0.0]
    for _ in range(depth):
        v.append(beta0**2 * v[-1] + 1 / d)
    curve = M.finite_width_gap_floor(beta0, n, d, depth=depth)
    np.testing.assert_allclose(curve, (n - 1) / 2 * np.array(v), rtol=1e-12, atol=0)
    limit = M.finite_width_gap_floor(beta0, n, d)
    if beta0 < 1:
        assert curve[-1] == pytest.approx(limit, rel=1e-9)
    else:
        assert math.isinf(limit)


def test_simulator_errors():
    X0 = M.make_inputs(3, 16)
    with pytest.raises(ValueError, match="order"):
        M.simulate("relu", X0, 2, order="act_act")
    with pytest.raises(ValueError, match="normalisation"):
        M.simulate("relu", X0, 2, norm="group")
    with pytest.raises(ValueError, match="norm must be"):
        M.simulate("relu", X0, 2, norm=("layer", "rms"))
    with pytest.raises(ValueError, match="gain"):
        M.simulate("relu", X0, 2, gain=0.0)
    with pytest.raises(ValueError, match="method"):
        M.simulate("relu", X0, 2, method="slow")
    with pytest.raises(TypeError, match="floating-point torch tensor"):
        M.simulate("relu", X0.numpy(), 2)
    with pytest.raises(ValueError, match="shape"):
        M.simulate("relu", X0.reshape(-1), 2)
    with pytest.raises(TypeError, match="callable"):
        M.simulate(5, X0, 2)
    with pytest.raises(ValueError, match="act_norm"):
        M.simulate("relu", X0, 2, order="norm_act", norm="meanfield")
    with pytest.raises(ValueError, match="depth must be >= 1"):
        M.simulate("relu", X0, 0)
    with pytest.raises(ValueError, match="batch"):
        M.mean_field_grams("relu", np.eye(3), 2, norm="batch")
    with pytest.raises(ValueError, match="degeneracy"):
        M.make_inputs(3, 8, degeneracy=-1.0)


def test_leaky_relu_beta0_closed_form():
    for alpha in (0.0, 0.3, 0.7, 1.0):
        expected = ((1 + alpha) ** 2 / 4) / ((1 + alpha**2) / 2 - (1 - alpha) ** 2 / (2 * math.pi))
        assert H.nonlinearity_strength(M.leaky_relu(alpha)) == pytest.approx(expected, abs=1e-10)
    with pytest.raises(ValueError, match="alpha"):
        M.leaky_relu(1.5)


def test_training_helper_learns_the_teacher_task():
    g = torch.Generator().manual_seed(0)
    X, y = M.make_teacher_task(512, generator=g)
    assert X.shape == (512, 32) and y.unique().numel() > 3
    losses = M.train_deep_mlp("relu", X, y, depth=3, width=32, steps=150, lr=0.1, generator=g)
    assert losses.shape == (150,) and np.all(np.isfinite(losses))
    assert losses[-20:].mean() < 0.8 * losses[:5].mean()


def test_potential_contracts_at_least_like_the_paper_rate():
    """Mean field, LN after the activation: gamma_{l+1} <= gamma_l / (2 - beta_0) at every layer."""
    C0 = np.array([[1.0, 0.97, -0.4], [0.97, 1.0, 0.2], [-0.4, 0.2, 1.0]])
    assert M.correlation_potential(C0) == pytest.approx(0.97 / 0.03)
    for name in ("relu", "tanh", "exp", "gelu"):
        b = H.nonlinearity_strength(name)
        g = M.correlation_potential(M.mean_field_grams(name, C0, 12))
        assert np.all(g[1:] <= g[:-1] / (2 - b) * (1 + 1e-6)), name
        # small positive correlations: beta_0 rho <= rho' <= rho (beta_0 + (1 - beta_0) rho), ratio -> beta_0
        r = M.correlations(M.mean_field_grams(name, np.array([[1.0, 0.05], [0.05, 1.0]]), 6))[:, 0, 1]
        ratio = r[1:] / r[:-1]
        assert np.all(ratio >= b - 1e-6) and np.all(ratio <= b + (1 - b) * r[:-1] + 1e-6), name


def _floor_ratios(seed: int, n: int = 4, d: int = 400) -> tuple[float, float]:
    """150 ReLU networks (LN after act, 20 layers) from random, nearly orthogonal inputs; over layers 10-20:
    E[rho^2] over its AR(1) limit 1/(d (1 - beta_0^2)) = 2 floor / (n - 1), and the mean gap over the floor."""
    g = torch.Generator().manual_seed(seed)
    X0 = M.make_inputs(n, d, repeats=150, degeneracy=1.0, generator=g)
    run = M.simulate("relu", X0, 20, generator=g)
    floor = M.finite_width_gap_floor(H.nonlinearity_strength("relu"), n, d)
    C = M.correlations(run.grams[:, 10:].numpy())
    iu = np.triu_indices(n, 1)
    rho2_ratio = float((C[..., iu[0], iu[1]] ** 2).mean() / (2 * floor / (n - 1)))
    return rho2_ratio, float(run.isometry_gap[:, 10:].mean()) / floor


def test_finite_width_floor_from_orthogonal_inputs():
    """The AR(1) floor once the mean-field part has died out (ReLU, LN after act): the measured gap over the floor
    formula, and E[rho^2] over its AR(1) limit, lie in (1.0, 1.15).

    The bounds come from the spread over seeds 1-5 and 11 (test_finite_width_floor_underestimates_over_seeds):
    gap/floor in [1.042, 1.093] and E[rho^2]/v_inf in [1.031, 1.081], always above 1, so the heuristic floor is a
    slight underestimate here (the lower bound asserts that direction). A floor off by a factor 1.25
    (gap/floor ~ 0.87) or 0.9 (~ 1.2) fails."""
    rho2_ratio, gap_ratio = _floor_ratios(11)
    assert 1.0 < rho2_ratio < 1.15
    assert 1.0 < gap_ratio < 1.15


@pytest.mark.slow
def test_finite_width_floor_underestimates_over_seeds():
    """Over seeds 1-5 and 11 both ratios of _floor_ratios lie 3% to 9% above 1 (measured: 1.031 to 1.093): the
    AR(1) floor is a few percent below the measured gap at n = 4, d = 400, on every seed."""
    ratios = np.array([_floor_ratios(seed) for seed in (1, 2, 3, 4, 5, 11)])
    assert (ratios > 1.03).all() and (ratios < 1.1).all(), ratios


def test_train_activations_returns_one_curve_per_activation():
    g = torch.Generator().manual_seed(0)
    X, y = M.make_teacher_task(64, generator=g)
    out = E.train_activations(["relu", M.leaky_relu(0.5)], X, y, depth=2, width=16, steps=5, lr=0.05)
    assert [name for name, _, _ in out] == ["relu", "leaky_relu(0.5)"]
    assert out[0][1] == pytest.approx(H.nonlinearity_strength("relu"))
    assert all(losses.shape == (5,) and np.isfinite(losses).all() for _, _, losses in out)
    with pytest.raises(ValueError, match="at least one"):
        E.train_activations([], X, y, depth=2, width=16, steps=5, lr=0.05)


def test_batch_and_layer_curves_start_at_the_same_isometry():
    """simulate(norm="batch") measures layer 0 (the raw input, not centred) with the same isometry as the LN curve,
    so the same input starts both curves at the same value, the isometry of the input's Gram matrix; from layer 1
    on the batch-normalised features are centred (G 1 = 0) and the centred isometry is used; after norm -> act they
    are not centred and the plain isometry is reported."""
    g = torch.Generator().manual_seed(0)
    X0 = torch.randn(16, 6, generator=g, dtype=torch.float64) + 0.5
    runs = {norm: M.simulate("relu", X0, 3, norm=norm, generator=torch.Generator().manual_seed(1)) for norm in ("layer", "batch")}
    start = float(isometry(X0.T @ X0 / 16))
    assert float(runs["layer"].isometry[0, 0]) == pytest.approx(start, rel=1e-12)
    assert float(runs["batch"].isometry[0, 0]) == pytest.approx(start, rel=1e-12)
    G1 = runs["batch"].grams[0, 1]
    assert float(G1.sum(dim=-1).abs().max()) < 1e-10  # centred from layer 1 on
    assert 0.0 < float(runs["batch"].isometry[0, 1]) <= 1.0  # the centred isometry (the plain one is 0)
    # norm -> act: sigma(BN(h)) is not centred over the batch, so the plain isometry is reported, not the centred one
    post = M.simulate("relu", X0, 3, norm="batch", order="norm_act", generator=torch.Generator().manual_seed(1))
    G = post.grams[0, 1:]
    assert float(G.sum(dim=-1).abs().min()) > 1e-3  # not centred
    torch.testing.assert_close(post.isometry[0, 1:], isometry(G), rtol=1e-12, atol=0.0)


def test_batch_centring_with_per_sample_scaling_is_measured_with_the_plain_isometry():
    """The pair (batch centring, layer scaling) divides each sample by its own norm after centring, which breaks
    X 1 = 0 (at ReLU, depth 10, d = 400 the referee measured ||G 1|| / ||G|| = 0.079): simulate reports the plain
    isometry there and says so (measure "plain"). Where the scaling keeps X 1 = 0 (batch, meanfield, none) it reports
    the centred isometry, and centered_isometry accepts those Grams (float64 and float32; before, a float32 run with
    batch scaling diverged: a feature that is 0 on the whole batch gave 0 / 0)."""
    X0 = M.make_inputs(6, 400, repeats=2, generator=torch.Generator().manual_seed(0))
    run = M.simulate("relu", X0, 10, norm=("batch", "layer"), generator=torch.Generator().manual_seed(1))
    assert run.measure == "plain" and not M.centred_measure("act_norm", ("batch", "layer"))
    assert float(centring_defect(run.grams[:, 1:]).max()) > 1e-3  # not centred
    torch.testing.assert_close(run.isometry, isometry(run.grams), rtol=1e-12, atol=0.0)
    for scaling in ("batch", "meanfield", "none"):
        assert M.centred_measure("act_norm", ("batch", scaling)) and not M.centred_measure("norm_act", ("batch", scaling))
        for dtype in (torch.float64, torch.float32):
            run = M.simulate("relu", X0.to(dtype), 4, norm=("batch", scaling), generator=torch.Generator().manual_seed(1))
            assert run.measure == "centred from layer 1" and not bool(run.diverged.any())  # float32: a dead ReLU
            # feature (all 6 outputs 0, likely among 400) stays 0 after batch scaling, not 0 / 0 = nan
            torch.testing.assert_close(run.isometry[:, 1:], centered_isometry(run.grams[:, 1:], centred_in=dtype),
                                       rtol=1e-12, atol=0.0)
            if dtype == torch.float64:
                assert float(isometry(run.grams[:, 1:]).max()) == 0.0  # the plain isometry would be 0: singular


def _tanh_variance_fixed_point(gain):
    """q* > 0 with q* = E tanh(gain sqrt(q*) Z)^2 (the output variance of tanh without normalisation), gain > 1."""
    from scipy.optimize import brentq

    return brentq(lambda q: H.mean_and_variance("tanh", scale=gain * math.sqrt(q))[1] - q, 1e-4, 1.0, xtol=1e-14)


@pytest.mark.parametrize("gain", [0.5, 1.0, 1.5, 2.0])
def test_tanh_without_normalisation_stalls_at_gain_at_most_one_and_whitens_above(gain):
    """Mean field, no normalisation, tanh. Gain s <= 1: the variance q_l = E tanh(s sqrt(q_{l-1}) Z)^2 goes to 0,
    tanh(s sqrt(q_l) .) turns linear and the correlation stalls at a non-zero limit (the per-layer ratio -> 1).
    Gain s > 1: q_l -> q* > 0 and the correlation contracts at the rate beta_0(tanh(s sqrt(q*) .)) per layer,
    slower than LN at the same gain (beta_0(tanh(s .)), pre-activations of variance s^2)."""
    depth = 40
    mf = M.mean_field_grams("tanh", np.array([[1.0, 0.9], [0.9, 1.0]]), depth, norm="none", gain=gain)
    q, rho = mf[:, 0, 0], M.correlations(mf)[:, 0, 1]
    if gain <= 1:
        assert q[-1] < 0.02 and np.all(np.diff(q) < 0)
        assert rho[-1] > 0.8  # stalled: far from 0 after 40 layers
        assert rho[-1] / rho[-2] > 0.9995
        assert 0.9995 < H.nonlinearity_strength("tanh", scale=gain * math.sqrt(q[-1])) <= 1.0
    else:
        q_star = _tanh_variance_fixed_point(gain)
        assert q[-1] == pytest.approx(q_star, rel=1e-6)
        rate = H.nonlinearity_strength("tanh", scale=gain * math.sqrt(q_star))
        assert rho[-1] < 0.25 * rho[0]
        assert rho[-1] / rho[-2] == pytest.approx(rate, rel=2e-3)
        assert H.nonlinearity_strength("tanh", scale=gain) < rate < 1  # LN at the same gain is faster


@pytest.mark.parametrize("seed", range(3))
def test_norm_before_activation_follows_kappa_tilde_on_the_cosines(seed):
    """thm-ch4-correlation-map, norm->act, from layer 2 on: the inputs sigma(LN(h)) have ||x||^2/d -> E relu(Z)^2 = 1/2,
    not 1, yet the cosines follow kappa-tilde layer after layer (LN on the pre-activations divides the scale out).
    d = 20000, n = 4, three layers; cosines within 0.03 (fluctuations ~ 1/sqrt(d) = 0.007)."""
    X0 = M.make_inputs(4, 20_000, degeneracy=5.0, generator=torch.Generator().manual_seed(seed))
    S = M.simulate("relu", X0, 3, order="norm_act", norm="layer", generator=torch.Generator().manual_seed(100 + seed)).grams[0]
    diag = torch.diagonal(S, dim1=-2, dim2=-1)
    assert torch.allclose(diag[1:], torch.full_like(diag[1:], 0.5), atol=0.03)
    cos = S / torch.sqrt(diag[..., :, None] * diag[..., None, :])
    rho = cos[0].numpy()
    for layer in range(1, 4):
        rho = np.array([[1.0 if a == b else float(H.correlation_map("relu", rho[a, b], centered=False))
                         for b in range(4)] for a in range(4)])
        assert np.abs(cos[layer].numpy() - rho).max() < 0.03, layer


def test_a_float32_simulation_flags_grams_within_float32_rounding_of_singular():
    """A batch holding x and -x has a singular Gram at every layer of an He2 network (even activation):
    float64 (reference sampler) reports isometry 0; float32 rounding would report small positive numbers
    (0.02-0.05), so a float32 run reports nan there and flags it in ``undetermined`` (the precision rule of
    lnbook.isometry.gram), never a number, down to depth 30 with the fast sampler (which keeps the tie exact)."""
    g = torch.Generator().manual_seed(0)
    X = torch.randn(500, 3, generator=g, dtype=torch.float64)
    X = torch.cat([X, -X[:, :1]], dim=1)
    X = X / X.norm(dim=0, keepdim=True) * X.shape[0] ** 0.5
    # the reference sampler computes W(-x) = -(Wx) exactly, so the float64 Gram is exactly singular: I = 0
    run64 = M.simulate("he2", X, 3, method="reference", generator=torch.Generator().manual_seed(1))
    assert torch.all(run64.isometry == 0) and not run64.undetermined.any()
    run32 = M.simulate("he2", X.float(), 30, generator=torch.Generator().manual_seed(1))  # fast sampler, depth 30
    assert run32.undetermined.all() and torch.isnan(run32.isometry).all()
    # the same rule as the gram module's: a float32 Gram there is refused
    with pytest.raises(ValueError, match="float32 Gram is not determined"):
        isometry(run32.grams[0, -1], computed_in=torch.float32)
    # a regular float32 batch is still measured, close to the float64 run
    Y = torch.randn(500, 4, generator=g, dtype=torch.float64)
    r64 = M.simulate("relu", Y, 2, generator=torch.Generator().manual_seed(2))
    r32 = M.simulate("relu", Y.float(), 2, generator=torch.Generator().manual_seed(2))
    assert not r32.undetermined.any()
    assert torch.allclose(r32.isometry, r64.isometry, atol=2e-2)  # measured (the draws differ between dtypes)
    # batch norm: the rule applies to the centred Gram from layer 1 on
    Z = torch.randn(500, 32, generator=g, dtype=torch.float64)  # enough samples that no ReLU feature is all zero
    rb = M.simulate("relu", Z.float(), 2, norm="batch", generator=torch.Generator().manual_seed(2))
    assert not rb.undetermined.any() and not rb.diverged.any() and torch.isfinite(rb.isometry).all()


def _batch_with_ties(d=300, n=6, seed=0):
    """Unit-norm-scaled Gaussian samples; the last column is replaced by a copy of column 0 (``repeat``) or by its
    negation (``antipodal``)."""
    X = torch.randn(d, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    X = X / X.norm(dim=0, keepdim=True) * d**0.5
    return torch.cat([X[:, :-1], X[:, :1]], dim=1), torch.cat([X[:, :-1], -X[:, :1]], dim=1)


@pytest.mark.parametrize("activation,tie", [("relu", "repeat"), ("he2", "repeat"), ("relu", "antipodal"), ("he2", "antipodal")])
def test_the_fast_sampler_keeps_exact_ties_exact_at_depth_30(activation, tie):
    """A repeated sample (and, under an even activation, an antipodal pair) makes the Gram singular at every layer.
    Factoring the full Gram gave the copies rounding-sized differences that LN after the activation amplifies by
    about kappa'(1) per layer (rho = 1 repels): isometry 0.05-0.2 at depth 30 with d = 1000. The fast sampler now
    samples the distinct columns once, so the tie stays bit for bit and the isometry is exactly 0 at every layer
    (ReLU with x, -x is not singular after layer 1: there only the tie at the input is checked)."""
    repeat, antipodal = _batch_with_ties()
    X = repeat if tie == "repeat" else antipodal
    iso = M.simulate(activation, X, 30, method="fast", generator=torch.Generator().manual_seed(1)).isometry[0]
    assert iso[0] == 0
    if tie == "repeat" or activation == "he2":
        assert torch.all(iso == 0), iso
    else:  # relu(-h) != +-relu(h): a genuine (non-singular) batch after layer 1, measured as such
        assert torch.all(iso[1:] > 0)
    # float32: the Gram is within float32 rounding of singular at every layer, so every layer is flagged
    run32 = M.simulate(activation, X.float(), 30, method="fast", generator=torch.Generator().manual_seed(1))
    if tie == "repeat" or activation == "he2":
        assert run32.undetermined.all() and torch.isnan(run32.isometry).all(), run32.isometry


def test_exact_sign_classes_finds_copies_and_negations_only():
    g = torch.Generator().manual_seed(3)
    X = torch.randn(2, 50, 5, generator=g, dtype=torch.float64)
    X[0, :, 3] = X[0, :, 1]
    X[0, :, 4] = -X[0, :, 1]
    X[1, :, 2] = X[1, :, 0] * (1 + 1e-12)  # collinear to rounding, not a bit-for-bit copy: not tied
    rep, sign = M.exact_sign_classes(X)
    assert rep.tolist() == [[0, 1, 2, 1, 1], [0, 1, 2, 3, 4]]
    assert sign.tolist() == [[1, 1, 1, 1, -1], [1, 1, 1, 1, 1]]
    H = M._fast_preactivations(X, 1.0, g)
    assert torch.equal(H[0, :, 3], H[0, :, 1]) and torch.equal(H[0, :, 4], -H[0, :, 1])


def test_the_fast_sampler_is_unchanged_for_batches_without_ties():
    """Without exact ties the fast sampler is the plain eigen-factor draw: the same numbers from the same seed."""
    X = torch.randn(3, 40, 6, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    H = M._fast_preactivations(X, 1.3, torch.Generator().manual_seed(5))
    m = X.abs().amax(dim=(-1, -2), keepdim=True)
    Z = torch.randn(X.shape, generator=torch.Generator().manual_seed(5), dtype=X.dtype)
    assert torch.equal(H, (Z @ M._eigen_factor(X / m, 1.3).transpose(-1, -2)) * m)


def test_mean_field_grams_reports_only_overflow_as_divergence():
    """Overflow of the activation on the quadrature nodes (exp without normalisation, variance 3e3 after one layer)
    is divergence: nan from that layer on. A quadrature that does not converge is a refusal, not divergence: a kink
    not in `breakpoints` (relu(x - 0.5)) or a singularity (|x|^-0.6 + x) raises its ValueError."""
    G0 = np.array([[1.0, 0.3, 0.1], [0.3, 1.0, 0.5], [0.1, 0.5, 1.0]])
    mf = M.mean_field_grams("exp", G0, 3, norm="none", gain=2.0)
    assert np.all(np.isfinite(mf[1])) and np.abs(mf[1]).max() < 1e150 and np.isnan(mf[2:]).all()
    shifted = lambda x: np.maximum(np.asarray(x) - 0.5, 0.0)  # noqa: E731
    assert np.all(np.isfinite(M.mean_field_grams(shifted, G0, 3, breakpoints=(0.5,))))
    for f in (shifted, lambda x: np.abs(np.asarray(x)) ** -0.6 + x):
        with pytest.raises(ValueError, match="does not converge") as err:
            M.mean_field_grams(f, G0, 2)
        assert not isinstance(err.value, H.NonFiniteIntegrandError)


def _near_tie_growth(seed, d=20000, depth=10):
    """Per-layer growth of ||x_a - x_b|| and of 1 - rho for two columns 1e-6 apart under ReLU -> LayerNorm (exact
    law of W x: Z R with x = Q R and Z i.i.d. N(0, 1), so no d x d matrix is drawn)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(d, 1, generator=g, dtype=torch.float64)
    x = torch.cat([x, x + 1e-6 * torch.randn(d, 1, generator=g, dtype=torch.float64)], 1)
    dist, gap = [], []
    for _ in range(depth):
        h = torch.randn(d, 2, generator=g, dtype=torch.float64) @ torch.linalg.qr(x)[1] / math.sqrt(d)
        y = torch.relu(h)
        y = y - y.mean(0)
        x = y / y.pow(2).mean(0).sqrt()
        dist.append(float((x[:, 0] - x[:, 1]).norm()))
        gap.append(1 - float(x[:, 0] @ x[:, 1]) / d)
    return (dist[-1] / dist[0]) ** (1 / (depth - 1)), (gap[-1] / gap[0]) ** (1 / (depth - 1))


def test_layer_norm_after_relu_amplifies_one_minus_rho_by_kappa_prime_and_the_distance_by_its_root():
    """The chapter's remark on near ties: 1 - rho grows by kappa'(1) = E sigma'^2 / Var sigma (1.467 for ReLU) per
    layer and the distance of the normalised columns by its square root (1.211), on 5 seeds at d = 20000."""
    kappa1 = 0.5 / H.mean_and_variance("relu")[1]  # E relu'(Z)^2 = P(Z > 0) = 1/2
    assert kappa1 == pytest.approx(0.5 / (0.5 - 1 / (2 * math.pi)), rel=1e-10)
    for seed in range(5):
        dist, gap = _near_tie_growth(seed)
        assert abs(dist - math.sqrt(kappa1)) < 0.02, (seed, dist)
        assert abs(gap - kappa1) < 0.05, (seed, gap)


def test_the_fast_sampler_resolves_a_nearly_equal_float32_pair_like_the_reference():
    """A float32 pair at 1 - rho = 5e-9: the fast sampler factors the Gram in float64 (in float32 the eigenvalues'
    rounding swamped the pair's small eigenvalue: measured 1 - rho came out 0, two distinct columns identical).
    One layer's pre-activations, 1 - rho measured against its true value, mean over 200 draws at d = 1000."""
    gen = torch.Generator().manual_seed(3)
    d = 1000
    x = torch.randn(d, generator=gen, dtype=torch.float64)
    e = torch.randn(d, generator=gen, dtype=torch.float64)
    e = e - (e @ x) / (x @ x) * x
    y = x + 1e-4 * e / e.norm() * x.norm()  # 1 - cos = 5e-9 exactly to first order
    X = torch.stack([x, y], dim=-1)
    true = 1 - float((x @ y) / (x.norm() * y.norm()))
    X32 = X.float()
    true32 = 1 - float((X32[:, 0].double() @ X32[:, 1].double()) / (X32[:, 0].double().norm() * X32[:, 1].double().norm()))
    ratios = []
    for s in range(200):
        H_ = M._fast_preactivations(X32, 1.0, torch.Generator().manual_seed(s)).double()
        c = (H_[:, 0] @ H_[:, 1]) / (H_[:, 0].norm() * H_[:, 1].norm())
        ratios.append((1 - float(c)) / true32)
    assert true == pytest.approx(5e-9, rel=1e-3)
    assert 0.7 < float(np.mean(ratios)) < 1.3
