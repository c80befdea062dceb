r"""Shallow one-variable nets and how well they fit (chapter 6): the targets, the measured errors and training.

* :func:`smooth_target`, :func:`lipschitz_target` — the two targets of the chapter, both :math:`2\pi`-Lipschitz;
* :func:`fit_error`, :func:`sup_error` — the measured error of a fit on a grid;
* :func:`shallow_net`, :func:`train_shallow_net`, :func:`train_shallow_nets`, :func:`trained_errors` —
  ``Linear(1, N) -> (PLN | LN | ReLU) -> Linear(N, 1)`` trained on a target, one seed or several at once;
* :func:`compare_over_seeds`, :func:`describe_over_eps` — two kinds of net trained from the same seeds, compared by
  their medians and seed by seed, with the verdict in words (which one fits better, or neither by a stated factor).

Neurons are the hidden units (the width of the middle layer); the parameter count of
``Linear(1, N) -> (PLN | LN | ReLU) -> Linear(N, 1)`` without affine norms is :math:`3N + 1` for all three.
The constructions with proved errors are in :mod:`lnbook.ln_activation.staircase` (PLN and ReLU) and the
shallow-LN limit in :mod:`lnbook.ln_activation.shallow_ln`.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from lnbook.core.norms import ParallelLayerNorm
from lnbook.ml.models import mlp
from lnbook.util.device import resolve_device
from lnbook.util.stats import binomial_interval
from lnbook.util.validation import check_positive_int

__all__ = [
    "smooth_target",
    "lipschitz_target",
    "TARGET_LIPSCHITZ",
    "check_interval",
    "FitError",
    "fit_error",
    "sup_error",
    "shallow_net",
    "train_shallow_net",
    "train_shallow_nets",
    "train_shallow_net_widths",
    "train_shallow_net_specs",
    "trained_errors",
    "SeedComparison",
    "compare_over_seeds",
    "describe_over_eps",
]


TARGET_LIPSCHITZ = 2 * math.pi  # both targets below are 2*pi-Lipschitz on the real line


def smooth_target(x: torch.Tensor) -> torch.Tensor:
    r"""The smooth target :math:`\cos(2\pi x)` (two periods on :math:`[-1, 1]`)."""
    return torch.cos(2 * math.pi * x)


def lipschitz_target(x: torch.Tensor) -> torch.Tensor:
    r"""The Lipschitz target :math:`|\sin(2\pi x)|`: :math:`2\pi`-Lipschitz, with kinks at the multiples of 1/2."""
    return torch.sin(2 * math.pi * x).abs()


def check_interval(interval) -> tuple[float, float]:
    """``interval`` as a pair of floats ``(a, b)`` with finite ``a < b``, or a ValueError saying so."""
    try:
        a, b = (float(v) for v in interval)
    except (TypeError, ValueError):
        raise ValueError(f"interval must be a pair (a, b) of numbers, got {interval!r}") from None
    if not (math.isfinite(a) and math.isfinite(b) and a < b):
        raise ValueError(f"interval must be (a, b) with finite a < b, got {interval!r}")
    return a, b


# --- measuring ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FitError:
    """Errors of a fit on a grid: the largest, where it is, and the root-mean-square."""

    sup: float
    worst_x: float
    rms: float


@contextlib.contextmanager
def _eval_mode(model: nn.Module):
    """Within the block, ``model`` and every submodule are in eval mode (dropout off, batch norm on its running
    statistics), so that the model is one function; afterwards each module's own mode is restored (also when the
    block raises)."""
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        yield model
    finally:
        for m, training in modes.items():
            m.training = training


@torch.no_grad()
def fit_error(model: nn.Module, g, interval=(-1.0, 1.0), n: int = 20001) -> FitError:
    """:class:`FitError` of ``model`` against ``g`` on ``n`` equally spaced points of the interval (ends
    included), evaluated in the model's dtype and in eval mode (a model with dropout or batch
    norm left in training mode is measured as the function it computes, and its modes are restored). The sup over
    the grid is a lower estimate of the sup over the interval that tends to it as ``n`` grows. A module without
    parameters is evaluated in float64 on the CPU; a NaN or infinite value on the grid raises a ValueError."""
    a, b = check_interval(interval)
    n = check_positive_int(n, "n", minimum=2)
    param = next(model.parameters(), None)  # a module without parameters (nn.Tanh()): float64 on the CPU
    dtype, device = (torch.float64, "cpu") if param is None else (param.dtype, param.device)
    x = torch.linspace(a, b, n, dtype=torch.float64).unsqueeze(1)
    with _eval_mode(model):
        out = model(x.to(dtype=dtype, device=device)).double().cpu().reshape(-1)
    err = (out - g(x.reshape(-1))).abs()
    if not bool(torch.isfinite(err).all()):
        bad = ~torch.isfinite(err)
        raise ValueError(f"the model's output (or g) is not finite at {int(bad.sum())} grid point(s), first at "
                         f"x = {float(x[bad.nonzero()[0, 0], 0])!r} (an eps = 0 LayerNorm whose input has zero variance "
                         f"there?): the sup error is undefined; use eps > 0, or an n or interval that avoids those points")
    k = int(err.argmax())
    return FitError(sup=float(err[k]), worst_x=float(x[k, 0]), rms=float(err.pow(2).mean().sqrt()))


def sup_error(model: nn.Module, g, interval=(-1.0, 1.0), n: int = 20001) -> float:
    """``max |model(x) - g(x)|`` over ``n`` equally spaced points of the interval (see :func:`fit_error`)."""
    return fit_error(model, g, interval, n).sup


def shallow_net(kind: str, neurons: int, *, eps: float = 1e-5, group_size: int = 2) -> nn.Sequential:
    """``Linear(1, N) -> PLN | LN | ReLU -> Linear(N, 1)`` by name (``"pln"``, ``"ln"``, ``"relu"``), no affine."""
    neurons = check_positive_int(neurons, "neurons", minimum=2)
    if kind == "pln":
        return mlp(1, neurons, 1, 1, norm="pln", group_size=group_size, eps=eps)
    if kind == "ln":
        return mlp(1, neurons, 1, 1, norm="ln", eps=eps)
    if kind == "relu":
        return mlp(1, neurons, 1, 1, norm="none", activation="relu")
    raise ValueError(f"kind must be 'pln', 'ln' or 'relu', got {kind!r}")


def train_shallow_net(
    kind: str,
    g,
    width: int,
    *,
    steps: int,
    lr: float = 1e-2,
    n_train: int = 256,
    seed: int = 0,
    interval=(-1.0, 1.0),
    eps: float = 1e-5,
    group_size: int = 2,
    device=None,
) -> nn.Sequential:
    """``shallow_net(kind, width)`` trained on ``n_train`` equally spaced points of ``g`` (full-batch Adam,
    mean squared error, learning rate ``lr`` decayed by a cosine to 0, seeded), returned on the CPU."""
    from lnbook.ml.training import train

    a, b = check_interval(interval)
    steps = check_positive_int(steps, "steps")
    x = torch.linspace(a, b, n_train, dtype=torch.float64).unsqueeze(1)
    y = g(x.reshape(-1))
    torch.manual_seed(seed)
    model = shallow_net(kind, int(width), eps=eps, group_size=group_size)
    train(
        model, x.float(), y.float(), task="regression", epochs=steps, batch_size=None, optimizer="adam", lr=lr,
        lr_schedule=lambda e: 0.5 * (1 + math.cos(math.pi * e / steps)), seed=seed, device=device,
        log_every=steps, progress=False, report=False,
    )
    return model.cpu()


_ELEMENTWISE = (nn.Identity, nn.ReLU, nn.Tanh)


def _middle_key(model: nn.Sequential) -> tuple:
    """What the middle layers of a shallow net compute, as a key: nets with equal keys can share one call of them."""
    middle = list(model)[1:-1]
    if len(middle) == 1 and type(middle[0]) is ParallelLayerNorm:
        norm = middle[0]
        return ("pln", norm.group_size, norm.p, norm.centering, norm.eps)
    if len(middle) == 1 and type(middle[0]) is nn.LayerNorm and middle[0].weight is None and middle[0].bias is None:
        return ("ln", middle[0].normalized_shape[0], middle[0].eps)
    if middle and all(type(m) in _ELEMENTWISE for m in middle):
        return ("elementwise", *(type(m).__name__ for m in middle))
    raise TypeError("side-by-side training needs Linear(1, N) -> PLN | LayerNorm (no affine) | activation -> Linear(N, 1)")


def _middle_for(key: tuple) -> nn.Module:
    """One module that applies the middle layers of every net of a run of equal ``key`` to their concatenated widths:
    a LayerNorm over ``N`` features, block by block, is PLN with groups of ``N``."""
    if key[0] == "pln":
        return ParallelLayerNorm(key[1], p=key[2], centering=key[3], eps=key[4])
    if key[0] == "ln":
        return ParallelLayerNorm(key[1], eps=key[2])
    return nn.Sequential(*(getattr(nn, name)() for name in key[1:]))


def _train_side_by_side(models, g, *, steps: int, lr: float, n_train: int, interval, device) -> None:
    """Train the shallow nets ``models`` (each ``Linear(1, N_i) -> middle -> Linear(N_i, 1)``) in place, all in one
    ``Linear(1, sum N_i) -> middles -> Linear(sum N_i, S)`` with a block-diagonal (masked) read-out, by one Adam on
    the sum of their mean squared errors with the cosine schedule of :func:`train_shallow_net`. Adam is
    elementwise and each block sees only its own net's loss, so this is separate training per net up to float
    rounding, at about the cost of one: the per-step overhead of many small nets is paid once."""
    a, b = check_interval(interval)
    device = resolve_device(device)
    S = len(models)
    widths = [m[0].out_features for m in models]
    keys = [_middle_key(m) for m in models]
    runs, start = [], 0  # (slice of the hidden features, module): consecutive nets with the same middle share a call
    for i, (w, key) in enumerate(zip(widths, keys)):
        if runs and keys[i - 1] == key:
            runs[-1][0] = slice(runs[-1][0].start, start + w)
        else:
            runs.append([slice(start, start + w), _middle_for(key)])
        start += w
    total = start
    first, last = nn.Linear(1, total), nn.Linear(total, S)
    with torch.no_grad():
        first.weight.copy_(torch.cat([m[0].weight for m in models]))
        first.bias.copy_(torch.cat([m[0].bias for m in models]))
        last.weight.copy_(torch.block_diag(*[m[-1].weight for m in models]))
        last.bias.copy_(torch.cat([m[-1].bias for m in models]))
    first, last = first.to(device), last.to(device)
    mask = torch.block_diag(*[torch.ones(1, w) for w in widths]).to(device)
    x = torch.linspace(a, b, n_train, dtype=torch.float64).unsqueeze(1)
    y = g(x.reshape(-1)).float().to(device).unsqueeze(1)
    x = x.float().to(device)

    def middle(h):
        if len(runs) == 1:
            return runs[0][1](h)
        return torch.cat([module(h[:, sl].contiguous()) for sl, module in runs], dim=1)

    opt = torch.optim.Adam([first.weight, first.bias, last.weight, last.bias], lr=lr)
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        out = nn.functional.linear(middle(first(x)), last.weight * mask, last.bias)
        loss = ((out - y) ** 2).mean(dim=0).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if not math.isfinite(float(loss.detach())):
            raise RuntimeError(f"the loss became {float(loss.detach())} at step {step + 1}; lower the learning rate")
    first, last = first.cpu(), last.cpu()
    with torch.no_grad():
        offset = 0
        for i, (m, w) in enumerate(zip(models, widths)):
            block = slice(offset, offset + w)
            m[0].weight.copy_(first.weight[block])
            m[0].bias.copy_(first.bias[block])
            m[-1].weight.copy_(last.weight[i : i + 1, block])
            m[-1].bias.copy_(last.bias[i : i + 1])
            offset += w


def train_shallow_nets(
    kind: str,
    g,
    width: int,
    seeds,
    *,
    steps: int,
    lr: float = 1e-2,
    n_train: int = 256,
    interval=(-1.0, 1.0),
    eps: float = 1e-5,
    group_size: int = 2,
    device=None,
) -> list[nn.Sequential]:
    """:func:`train_shallow_net` for several seeds at once (each from its own seeded initialisation),
    trained on ``device`` (default :func:`lnbook.util.device.get_device`), returned on the CPU.

    The seeds' networks are the blocks of one ``Linear(1, S N) -> PLN | LN | ReLU -> Linear(S N, S)`` with a read-out
    masked block-diagonal, trained by one Adam on the sum of their mean squared errors: Adam is elementwise and
    the middle layer acts within a block (LN over a block of ``N`` is PLN with groups of ``N``), so this is
    separate training per seed up to float rounding (which long training of near-step pairs can amplify:
    compare spreads over seeds), at about the cost of one.
    """
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    specs = [{"kind": kind, "width": width, "seed": s, "eps": eps, "group_size": group_size} for s in seeds]
    return train_shallow_net_specs(specs, g, steps=steps, lr=lr, n_train=n_train, interval=interval, device=device)


def train_shallow_net_widths(
    kind: str,
    g,
    widths,
    *,
    steps: int,
    lr: float = 1e-2,
    n_train: int = 256,
    seed: int = 0,
    interval=(-1.0, 1.0),
    eps: float = 1e-5,
    group_size: int = 2,
    device=None,
) -> dict[int, nn.Sequential]:
    """``{N: train_shallow_net(kind, g, N, seed=seed, ...)}`` for every width ``N``, all trained at once side by side
    (as :func:`train_shallow_nets` trains seeds): equal to separate training up to float rounding, trained on ``device``, returned on
    the CPU."""
    widths = [int(w) for w in widths]
    if not widths:
        raise ValueError("widths must name at least one width")
    specs = [{"kind": kind, "width": w, "seed": seed, "eps": eps, "group_size": group_size} for w in widths]
    models = train_shallow_net_specs(specs, g, steps=steps, lr=lr, n_train=n_train, interval=interval, device=device)
    return dict(zip(widths, models))


def train_shallow_net_specs(
    specs,
    g,
    *,
    steps: int,
    lr: float = 1e-2,
    n_train: int = 256,
    interval=(-1.0, 1.0),
    device=None,
) -> list[nn.Sequential]:
    """Several shallow nets of different kinds, widths, seeds, eps or group sizes, all trained at once side by side.

    ``specs`` is a sequence of dicts with the keys ``kind`` and ``width`` and optionally ``seed`` (0), ``eps`` (1e-5)
    and ``group_size`` (2); net ``i`` is ``train_shallow_net(spec["kind"], g, spec["width"], seed=..., eps=...,
    group_size=..., steps=steps, lr=lr, ...)`` up to float rounding (as in :func:`train_shallow_nets`). Returns the
    nets in the order of ``specs``, trained on ``device`` (default :func:`lnbook.util.device.get_device`), on the CPU."""
    check_interval(interval)
    steps = check_positive_int(steps, "steps")
    specs = list(specs)
    if not specs:
        raise ValueError("specs must name at least one net")
    allowed = {"kind", "width", "seed", "eps", "group_size"}
    models = []
    for spec in specs:
        if not isinstance(spec, dict) or not {"kind", "width"} <= set(spec) or not set(spec) <= allowed:
            raise ValueError(f"each spec is a dict with kind and width and optionally seed, eps, group_size; got {spec!r}")
        torch.manual_seed(int(spec.get("seed", 0)))
        models.append(shallow_net(spec["kind"], int(spec["width"]), eps=spec.get("eps", 1e-5),
                                  group_size=spec.get("group_size", 2)))
    _train_side_by_side(models, g, steps=steps, lr=lr, n_train=n_train, interval=interval, device=device)
    return models


def trained_errors(
    kind: str,
    g,
    widths,
    *,
    steps: int,
    lr: float = 1e-2,
    n_train: int = 256,
    seed: int = 0,
    interval=(-1.0, 1.0),
    eps: float = 1e-5,
    group_size: int = 2,
    device=None,
) -> dict[int, FitError]:
    """The nets of :func:`train_shallow_net_widths` (every width ``N`` trained side by side, each as
    :func:`train_shallow_net` would up to float rounding): ``{N: FitError}`` measured on a grid 40 times finer
    than the training points."""
    nets = train_shallow_net_widths(kind, g, widths, steps=steps, lr=lr, n_train=n_train, seed=seed, interval=interval,
                                    eps=eps, group_size=group_size, device=device)
    return {width: fit_error(net, g, interval, n=40 * n_train) for width, net in nets.items()}


# --- comparing two kinds over seeds ----------------------------------------------------------------


@dataclass(frozen=True)
class SeedComparison:
    """The errors of two kinds of net trained from the same seeds (``errors_a[i]`` and ``errors_b[i]`` from seed
    ``i``), compared by their medians and seed by seed.

    ``better`` names the kind whose median error is below ``1 / factor`` times the other's, or is ``None`` when
    neither is; ``verdict`` says the same in words, for glueing into prose. ``a_better_seeds`` counts the seeds at
    which kind ``a`` has the smaller error, and ``interval`` is the 95% Clopper-Pearson interval of that fraction."""

    names: tuple[str, str]
    errors_a: np.ndarray
    errors_b: np.ndarray
    factor: float

    @property
    def seeds(self) -> int:
        return int(self.errors_a.size)

    @property
    def median_a(self) -> float:
        return float(np.median(self.errors_a))

    @property
    def median_b(self) -> float:
        return float(np.median(self.errors_b))

    @property
    def ratio(self) -> float:
        """``median_a / median_b`` (``inf`` when ``median_b`` is 0 and ``median_a`` is not, ``1`` when both are)."""
        if self.median_b == 0:
            return 1.0 if self.median_a == 0 else math.inf
        return self.median_a / self.median_b

    @property
    def a_better_seeds(self) -> int:
        return int(np.sum(self.errors_a < self.errors_b))

    @property
    def interval(self) -> tuple[float, float]:
        return binomial_interval(self.a_better_seeds, self.seeds)

    @property
    def better(self) -> str | None:
        a, b = self.names
        if self.median_a * self.factor < self.median_b:
            return a
        if self.median_b * self.factor < self.median_a:
            return b
        return None

    @property
    def verdict(self) -> str:
        a, b = self.names
        if self.better is None:
            return f"{a} and {b} are within a factor {self.factor:g} of each other"
        worse = b if self.better == a else a
        return f"{self.better} fit better than {worse}"


def _errors(values, name: str) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of numbers (one error per seed), got {type(values).__name__}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence (one error per seed), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must hold finite errors >= 0, got {arr.tolist()}")
    return arr


def compare_over_seeds(errors_a, errors_b, *, names=("a", "b"), factor: float = 1.25) -> SeedComparison:
    """:class:`SeedComparison` of two kinds of net trained from the same seeds: ``errors_a[i]`` and ``errors_b[i]``
    are their errors (for example sup errors) from seed ``i``. One kind *fits better* when its median error is below
    ``1 / factor`` times the other's (``factor >= 1``; ``factor = 1`` decides by the medians alone).

    >>> c = compare_over_seeds([0.1, 0.2, 0.3], [0.05, 0.1, 0.4], names=("pairs", "groups of 8"))
    >>> c.verdict, c.a_better_seeds
    ('groups of 8 fit better than pairs', 1)
    """
    a = _errors(errors_a, "errors_a")
    b = _errors(errors_b, "errors_b")
    if a.size != b.size:
        raise ValueError(f"errors_a and errors_b must come from the same seeds, got {a.size} and {b.size} errors")
    if isinstance(names, str) or len(tuple(names)) != 2 or not all(isinstance(n, str) and n for n in names):
        raise TypeError(f"names must be two non-empty strings, got {names!r}")
    if len(set(names)) != 2:
        raise ValueError(f"names must differ, got {names!r}")
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or not (math.isfinite(factor) and factor >= 1):
        raise ValueError(f"factor must be a finite number >= 1, got {factor!r}")
    return SeedComparison(names=tuple(names), errors_a=a, errors_b=b, factor=float(factor))


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _eps_text(eps: float) -> str:
    """``1e-05`` as ``10⁻⁵``, ``1.0`` as ``1``; other values as ``%g``."""
    exponent = round(math.log10(eps))
    if float(f"1e{exponent}") == eps:
        return "1" if exponent == 0 else "10" + str(exponent).translate(_SUPERSCRIPT)
    return f"{eps:g}"


def describe_over_eps(comparisons) -> str:
    """The verdicts of ``{eps: SeedComparison}`` in one phrase, the eps values in increasing order and grouped by
    verdict: ``"pairs fit better than groups of 8 at every ε tried (10⁻⁵, 10⁻³)"`` when they agree, else
    ``"groups of 8 fit better than pairs at ε = 10⁻⁵; pairs fit better than groups of 8 at ε = 10⁻³"`` (each
    verdict once, in the order of its smallest eps)."""
    if not isinstance(comparisons, dict) or not comparisons:
        raise ValueError("comparisons must be a non-empty dict {eps: SeedComparison}")
    for eps, c in comparisons.items():
        if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"each key must be an eps > 0, got {eps!r}")
        if not isinstance(c, SeedComparison):
            raise TypeError(f"each value must be a SeedComparison (compare_over_seeds), got {type(c).__name__}")
    if len({c.names for c in comparisons.values()}) != 1:
        raise ValueError("every comparison must compare the same two kinds, in the same order")
    groups: dict[str, list[float]] = {}
    for eps in sorted(comparisons):
        groups.setdefault(comparisons[eps].verdict, []).append(eps)
    if len(groups) == 1:
        (verdict, values), = groups.items()
        return f"{verdict} at every ε tried ({', '.join(_eps_text(e) for e in values)})"
    return "; ".join(f"{verdict} at ε = {', '.join(_eps_text(e) for e in values)}" for verdict, values in groups.items())
