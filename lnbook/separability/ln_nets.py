r"""Small LN-Nets and linear nets, and the experiment that separates them: minimising SSR.

An **LN-Net** (Ni et al., ICML 2024) composes linear (affine) layers and LayerNorm, with no other
activation: ``Linear -> LN -> Linear -> LN -> ... -> Linear``. Its **linear twin** has the same
widths with the LNs removed, so it is an affine map and its output SSR can never go below the
input's LSSR (:mod:`lnbook.core.scatter_ratio`). :func:`train_ssr` minimises the differentiable SSR of a
network's output by full-batch Adam, which shows the linear twin stalling at LSSR while the LN-Net
goes below it.

:func:`xor_dataset` and :func:`xor_ln_net` give the book's exact counterexample: four XOR points
with LSSR = 1 and a ``Linear(2, 3) -> LN -> Linear(3, 1)`` network whose output SSR is 0.

>>> from lnbook.core.scatter_ratio import ssr
>>> X, y = xor_dataset()
>>> out = xor_ln_net()(X).detach()
>>> out.ravel()  # 3*sqrt(2) on class 0, 3/sqrt(2) on class 1
tensor([4.2426, 4.2426, 2.1213, 2.1213], dtype=torch.float64)
>>> ssr(out, y)
0.0
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from lnbook.core.geometry import plane_basis
from lnbook.core.norms import LayerNorm
from lnbook.core.scatter_ratio import ssr, ssr_from_onehot
from lnbook.util.device import get_device
from lnbook.util.progress import progress_bar
from lnbook.util.validation import as_float_tensor, check_eps, check_positive_int

__all__ = [
    "linear_net",
    "ln_net",
    "random_labelled_dataset",
    "xor_dataset",
    "xor_ln_net",
    "noisy_xor",
    "plane_basis",
    "to_plane",
    "plane_ln_layer",
    "plane_layer_separability",
    "train_ssr",
    "ssr_curves",
]


def _widths(d_in: int, width: int, depth: int, d_out: int) -> list[int]:
    d_in = check_positive_int(d_in, "d_in")
    width = check_positive_int(width, "width")
    depth = check_positive_int(depth, "depth")
    d_out = check_positive_int(d_out, "d_out")
    return [d_in] + [width] * depth + [d_out]


def linear_net(d_in: int, width: int, depth: int, d_out: int, dtype=torch.float64) -> nn.Sequential:
    """``depth + 1`` affine layers ``d_in -> width -> ... -> width -> d_out`` and nothing else (an affine map)."""
    w = _widths(d_in, width, depth, d_out)
    return nn.Sequential(*[nn.Linear(a, b, dtype=dtype) for a, b in zip(w[:-1], w[1:])])


def ln_net(d_in: int, width: int, depth: int, d_out: int, eps: float = 1e-5, dtype=torch.float64) -> nn.Sequential:
    """The LN-Net twin of :func:`linear_net`: a LayerNorm (no affine) after each of the ``depth`` hidden layers."""
    w = _widths(d_in, width, depth, d_out)
    if width < 2:
        raise ValueError(f"ln_net needs width >= 2 (LayerNorm of a single feature is undefined), got {width}")
    eps = check_eps(eps)
    layers: list[nn.Module] = []
    for a, b in zip(w[:-2], w[1:-1]):
        layers += [nn.Linear(a, b, dtype=dtype), LayerNorm(eps, validate=False)]
    layers.append(nn.Linear(w[-2], w[-1], dtype=dtype))
    return nn.Sequential(*layers)


def random_labelled_dataset(m: int, d: int, k: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``m`` standard Gaussian points in ``R^d`` (float64) with balanced random labels ``0..k-1`` (long)."""
    m = check_positive_int(m, "m", minimum=2)
    d = check_positive_int(d, "d")
    k = check_positive_int(k, "k", minimum=2)
    if m < k:
        raise ValueError(f"m={m} samples cannot fill k={k} classes; use m >= k")
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(m, d, generator=g, dtype=torch.float64)
    y = (torch.arange(m) % k)[torch.randperm(m, generator=g)]
    return X, y


def xor_dataset(dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """XOR on four points: class 0 = {(1, 1), (-1, -1)}, class 1 = {(1, -1), (-1, 1)}. Both class means are 0."""
    X = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0]], dtype=dtype)
    return X, torch.tensor([0, 0, 1, 1])


def xor_ln_net(eps: float = 0.0, dtype=torch.float64) -> nn.Sequential:
    r"""The exact counterexample ``Linear(2, 3) -> LN -> Linear(3, 1)`` for :func:`xor_dataset`.

    Hidden layer :math:`h = (x_1 - x_2)(0, -1, 1) + (4, 2, 2)`: class 0 goes to ``(4, 2, 2)``, class 1
    to ``(4, 0, 4)`` and ``(4, 4, 0)``. LN puts these on the circle of radius :math:`\sqrt 3` at angles
    0 and :math:`\pm 60^\circ`; the read-out :math:`u = (2, -1, -1)` gives :math:`3\sqrt 2` for class 0
    and :math:`3/\sqrt 2` for both class-1 points (at ``eps = 0``), so the output SSR is 0.
    For ``eps > 0`` the two class-1 points still coincide (by the symmetry swapping features 2 and 3).
    """
    eps = check_eps(eps)
    first = nn.Linear(2, 3, dtype=dtype)
    last = nn.Linear(3, 1, dtype=dtype)
    with torch.no_grad():
        first.weight.copy_(torch.tensor([[0.0, 0.0], [-1.0, 1.0], [1.0, -1.0]], dtype=dtype))
        first.bias.copy_(torch.tensor([4.0, 2.0, 2.0], dtype=dtype))
        last.weight.copy_(torch.tensor([[2.0, -1.0, -1.0]], dtype=dtype))
        last.bias.zero_()
    return nn.Sequential(first, LayerNorm(eps), last)


def noisy_xor(n_per_blob: int = 25, noise: float = 0.15, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Four Gaussian blobs at the XOR points (std ``noise``), ``n_per_blob`` each; labels as :func:`xor_dataset`."""
    n_per_blob = check_positive_int(n_per_blob, "n_per_blob")
    if not (isinstance(noise, (int, float)) and noise >= 0):
        raise ValueError(f"noise must be a number >= 0, got {noise!r}")
    centres, labels = xor_dataset()
    g = torch.Generator().manual_seed(seed)
    X = centres.repeat_interleave(n_per_blob, 0)
    X = X + noise * torch.randn(X.shape, generator=g, dtype=torch.float64)
    return X, labels.repeat_interleave(n_per_blob)


def to_plane(v: torch.Tensor) -> torch.Tensor:
    """Coordinates ``v @ E`` of width-3 vectors (last dim) in the basis :func:`plane_basis` of the plane orthogonal to 1."""
    if not isinstance(v, torch.Tensor) or v.shape[-1] != 3:
        raise ValueError("to_plane expects a torch tensor whose last dimension has size 3")
    return v @ plane_basis(v.dtype).to(v.device)


def plane_ln_layer(theta: float, offset: float, eps: float = 0.0) -> nn.Sequential:
    r"""One ``Linear(2, 3) -> LN`` layer: rotate the input by ``theta`` (radians), shift it by ``offset``
    along the first axis, and embed it in the plane orthogonal to 1; then LayerNorm.

    In plane coordinates (:func:`to_plane`) the hidden vector is :math:`R_\theta x + \beta e_1` and,
    at ``eps = 0``, the layer's output is :math:`\sqrt 3\,(R_\theta x + \beta e_1)/\|R_\theta x + \beta e_1\|`:
    the radial projection of a shifted copy of the input onto the circle of radius :math:`\sqrt 3`.
    """
    eps = check_eps(eps)
    c, s = float(np.cos(theta)), float(np.sin(theta))
    E = plane_basis()
    lin = nn.Linear(2, 3, dtype=torch.float64)
    with torch.no_grad():
        lin.weight.copy_(E @ torch.tensor([[c, -s], [s, c]], dtype=torch.float64))
        lin.bias.copy_(float(offset) * E[:, 0])
    return nn.Sequential(lin, LayerNorm(eps))


def plane_layer_separability(X: torch.Tensor, y: torch.Tensor, theta: float, shifts) -> tuple[np.ndarray, np.ndarray]:
    """SSR and LSSR right after ``plane_ln_layer(theta, s)`` (``eps = 0``) for every shift ``s`` in ``shifts``.

    Returns two float64 arrays of ``len(shifts)``: the SSR of the layer's output, and its LSSR, the best SSR
    that one more linear layer can reach (:mod:`lnbook.core.scatter_ratio`).
    """
    from lnbook.core.scatter_ratio import lssr, ssr

    out_ssr, out_lssr = [], []
    with torch.no_grad():
        for shift in np.asarray(shifts, dtype=np.float64).ravel():
            Z = to_plane(plane_ln_layer(theta, float(shift))(X))
            out_ssr.append(ssr(Z, y))
            out_lssr.append(lssr(Z, y))
    return np.array(out_ssr), np.array(out_lssr)


def train_ssr(
    net: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    steps: int = 1000,
    lr: float = 1e-2,
    device: torch.device | str | None = None,
    cosine: bool = True,
) -> np.ndarray:
    """Minimise ``ssr_loss(net(X), y)`` by full-batch Adam; return the SSR before each step and after the last.

    The recorded values are :func:`~lnbook.core.scatter_ratio.ssr` of the outputs (float64, on the host),
    not the loss: the two agree (the loss is scale-invariant), but the record is the measure the chapter
    defines, whatever the training dtype.

    The learning rate starts at ``lr`` and, with ``cosine``, decays to 0 along a half cosine (this
    removes the late oscillations of Adam on the scale-invariant SSR). The network is moved to
    ``device`` (default :func:`lnbook.util.device.get_device`) and trained in place. Returns a float64
    numpy array of length ``steps + 1``.
    """
    steps = check_positive_int(steps, "steps")
    if not (isinstance(lr, (int, float)) and lr > 0):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    X = as_float_tensor(X, "X", min_dim=2)
    if not isinstance(y, torch.Tensor) or torch.is_floating_point(y) or y.dtype == torch.bool or y.dim() != 1:
        raise ValueError("y must be a one-dimensional integer torch tensor of labels; pass y.long()")
    if y.shape[0] != X.shape[0] or int(y.min()) < 0:
        raise ValueError(f"y must hold one label >= 0 per row of X ({X.shape[0]} rows), got {y.shape[0]} labels")
    device = torch.device(device) if device is not None else get_device()
    dtype = next(net.parameters()).dtype
    net.to(device)
    X = X.to(device, dtype)
    y = y.to(device)
    k = int(y.max()) + 1
    onehot = torch.nn.functional.one_hot(y, k).to(dtype)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps) if cosine else None
    history = np.empty(steps + 1, dtype=np.float64)
    y_host = y.cpu()
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        out = net(X)
        history[step] = ssr(out.detach(), y_host)
        loss = ssr_from_onehot(out, onehot)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
    with torch.no_grad():
        history[steps] = ssr(net(X), y_host)
    return history


def ssr_curves(
    X: torch.Tensor,
    y: torch.Tensor,
    width: int,
    depth: int,
    steps: int,
    seeds=(0,),
    lr: float = 1e-2,
    d_out: int = 1,
    eps: float = 1e-5,
    device=None,
    progress: bool = True,
) -> dict[str, np.ndarray]:
    """Train the linear net and the LN-Net of the same widths from each seed; SSR curves ``(len(seeds), steps + 1)``.

    Returns ``{"linear": ..., "ln": ...}``. A progress bar runs over the seeds (the book's bar: silent under
    ``LNBOOK_PROGRESS=0``, as the book's build runs the lab, so a lab cell passes no argument for it;
    ``progress=False`` turns it off).
    """
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    iterator = progress_bar(seeds, desc="seeds", enabled=bool(progress))
    curves: dict[str, list[np.ndarray]] = {"linear": [], "ln": []}
    d_in = X.shape[1]
    for seed in iterator:
        torch.manual_seed(seed)
        lin = linear_net(d_in, width, depth, d_out)
        torch.manual_seed(seed)
        lnn = ln_net(d_in, width, depth, d_out, eps=eps)
        curves["linear"].append(train_ssr(lin, X, y, steps=steps, lr=lr, device=device))
        curves["ln"].append(train_ssr(lnn, X, y, steps=steps, lr=lr, device=device))
    return {key: np.stack(val) for key, val in curves.items()}
