r"""Self-supervised learning with spectral transformations on scikit-learn's digits (the lab's ci scale).

Two augmented views of each image go through an MLP encoder and projector; the projector outputs ``z1, z2``
(the *embedding*) are trained with one of

* ``"mse"`` — the alignment term alone, :math:`2-2\overline{\cos}(z_1,z_2)` (no spectral transformation);
* ``"iternorm"`` — IterNorm on each view, then the alignment term (INTL without the trace loss);
* ``"intl"`` — IterNorm plus the trace loss with the code's coefficient :math:`\beta` (:func:`~lnbook.whitening.trace_loss.intl_loss`).

The frozen encoder features are then probed with a cosine k-NN and a few-shot logistic regression, and the
embedding's effective rank tells collapse from no collapse. Everything runs in float32 on ``device`` (default
:func:`lnbook.util.device.get_device`); spectra, features and accuracies come back on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from lnbook.ml.training import train_views
from lnbook.util.device import resolve_device
from lnbook.util.validation import check_positive_int
from lnbook.whitening.batch_axes import check_axis
from lnbook.whitening.rank import effective_rank, top_eigenvalue_share
from lnbook.whitening.trace_loss import alignment_loss, intl_loss

__all__ = [
    "METHODS",
    "DIGITS_SETTING",
    "DIGITS_EMB",
    "augment_digits",
    "mlp_encoder",
    "projector",
    "ssl_loss",
    "SSLRun",
    "train_ssl",
    "features",
    "knn_accuracy",
    "few_shot_accuracy",
    "evaluate_run",
]

METHODS = ("mse", "iternorm", "intl")
# the ci-scale setting of the lab (the paper-scale CIFAR setting is lnbook.whitening.cifar.OFFICIAL_CIFAR)
# The embedding width is 128 for axis 0, where the N x N batch Gram is whitened and the code has emb > batch; the
# Gram of 64 samples centred over 128 features can have full rank 64. On axis 1 it is 64, the batch size too: the
# 64 x 64 feature covariance of 64 samples has rank at most N - 1 = 63, so every axis-1 run whitens a singular
# covariance. IterNorm accepts it (phi_T(0) = 0: the null direction stays zero), and at the lab's T = 4 (which
# iter_norm does not measure) rounding on it stays far below the dtype's tolerance (the chapter's remark
# rem-ch8-singular-newton); ZCA with eps = 0 would refuse it. (tests/whitening/test_ssl.py checks this.)
DIGITS_SETTING = dict(batch=64, epochs=15, lr=0.3, momentum=0.9, weight_decay=1e-4, warmup_epochs=2,
                      hidden=128, feature_dim=32, projector_dim=128)
DIGITS_EMB = {0: 128, 1: 64}


def augment_digits(X: torch.Tensor, generator: torch.Generator, view: int = 0) -> torch.Tensor:
    """One random view of each 8x8 image (rows of ``X``): a shift by up to one pixel (zero fill), intensity
    times U(0.6, 1.4), 20% of the pixels dropped, Gaussian noise of standard deviation 0.1."""
    n = X.shape[0]
    img = X.reshape(n, 1, 8, 8)
    padded = nn.functional.pad(img, (1, 1, 1, 1))
    dx = torch.randint(0, 3, (n,), generator=generator)
    dy = torch.randint(0, 3, (n,), generator=generator)
    rows = (dy[:, None] + torch.arange(8))[:, :, None]
    cols = (dx[:, None] + torch.arange(8))[:, None, :]
    shifted = padded[torch.arange(n)[:, None, None], 0, rows, cols]
    scale = torch.empty(n, 1, 1).uniform_(0.6, 1.4, generator=generator)
    keep = (torch.rand(n, 8, 8, generator=generator) >= 0.2).to(X.dtype)
    noise = 0.1 * torch.randn(n, 8, 8, generator=generator)
    return (shifted * scale * keep + noise).reshape(n, 64).to(X.dtype)


def mlp_encoder(in_dim: int, hidden: int, out_dim: int) -> nn.Module:
    return nn.Sequential(nn.Linear(in_dim, hidden, bias=False), nn.BatchNorm1d(hidden), nn.ReLU(),
                         nn.Linear(hidden, out_dim))


def projector(in_dim: int, hidden: int, emb: int) -> nn.Module:
    """INTL's projector shape with one hidden layer: Linear (no bias) -> BatchNorm -> ReLU -> Linear."""
    return nn.Sequential(nn.Linear(in_dim, hidden, bias=False), nn.BatchNorm1d(hidden), nn.ReLU(),
                         nn.Linear(hidden, emb))


def ssl_loss(z1: torch.Tensor, z2: torch.Tensor, method: str, T: int = 4, axis: int = 0, *,
             check: bool = True) -> torch.Tensor:
    """The training loss of ``method`` (see the module docstring) on the two embeddings; ``check`` is passed to
    :func:`~lnbook.whitening.trace_loss.intl_loss` (``False``: IterNorm unchecked, as in the official code)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "mse":
        return alignment_loss(z1, z2)
    return intl_loss(z1, z2, T=T, axis=axis, beta=0.0 if method == "iternorm" else None, check=check)


@dataclass
class SSLRun:
    """A trained encoder and projector, the losses, and the embedding spectra recorded during training."""

    method: str
    T: int
    axis: int
    seed: int
    encoder: nn.Module
    projector: nn.Module
    losses: list[float] = field(default_factory=list)
    spectra: list[tuple[int, np.ndarray]] = field(default_factory=list)


def _spectrum(model: nn.Module, X: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        Z = model(X)
    Z = Z - Z.mean(0)
    lam = torch.linalg.eigvalsh((Z.T @ Z / (len(Z) - 1)).double()).flip(0).clamp_min(0)
    return (lam / lam.sum().clamp_min(1e-300)).cpu().numpy()


def train_ssl(X: torch.Tensor, method: str, T: int = 4, axis: int = 0, seed: int = 0, *, batch: int = 128,
              epochs: int = 30, lr: float = 0.3, momentum: float = 0.9, weight_decay: float = 1e-4,
              warmup_epochs: int = 2, hidden: int = 256, feature_dim: int = 64, projector_dim: int = 256,
              emb: int = 256, record_every: int | None = None, probe: torch.Tensor | None = None,
              augment=augment_digits, encoder: nn.Module | None = None, head: nn.Module | None = None,
              device=None, check: bool = True,
              progress: bool = False) -> SSLRun:
    """Train encoder + projector on the rows of ``X`` with ``method``; SGD with momentum, warm-up and cosine.

    ``record_every`` steps, the normalised eigenvalues of the embedding covariance of ``probe`` (default: the
    first 512 rows of ``X``) are stored in ``run.spectra``. ``augment(x, generator, view)`` makes the views;
    ``encoder`` and ``head`` replace the MLP encoder and projector. The loop is
    :func:`lnbook.ml.training.train_views` (a non-finite loss raises its ``TrainingDiverged``, a ``RuntimeError``).
    Trains on ``device`` (default :func:`lnbook.util.device.get_device`); the views are drawn on the CPU from a
    generator seeded with ``seed`` (the same views on every device) and moved there; the spectra are numpy arrays.
    ``check=False`` trains with IterNorm unchecked, as the official code does: for ``T > 4`` ``iter_norm``'s check
    measures every step and refuses outputs that are not :math:`\varphi_T` to half the digits (float32 IterNorm at
    ``T = 8`` on a collapsed spectrum), so a run that is meant to show what the official code does passes it.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    T, axis = check_positive_int(T, "T", minimum=0), check_axis(axis)
    device = resolve_device(device)
    torch.manual_seed(seed)
    enc = encoder if encoder is not None else mlp_encoder(X[0].numel(), hidden, feature_dim)
    proj = head if head is not None else projector(feature_dim, projector_dim, emb)
    model = nn.Sequential(enc, proj)
    run = SSLRun(method, T, axis, seed, enc, proj)
    probe = (X[:512] if probe is None else probe).to(device)

    def record(step: int, total: int, model: nn.Module) -> None:
        if record_every and (step % record_every == 0 or step == total - 1):
            model.eval()
            run.spectra.append((step, _spectrum(model, probe)))

    run.losses = train_views(model, X, lambda z1, z2: ssl_loss(z1, z2, method, T, axis, check=check), augment, epochs=epochs,
                             batch_size=batch, lr=lr, momentum=momentum, weight_decay=weight_decay,
                             warmup_epochs=warmup_epochs, seed=seed, device=device, on_step=record,
                             progress=progress, label=f"{method} T={T} axis={axis} seed={seed}")
    return run


def features(module: nn.Module, X: torch.Tensor, batch: int = 1024) -> torch.Tensor:
    """``module`` applied to ``X`` in evaluation mode, without gradients, in chunks (on the module's device)."""
    module.eval()
    device = next(p for p in module.parameters()).device
    with torch.no_grad():
        return torch.cat([module(X[i:i + batch].to(device)).cpu() for i in range(0, len(X), batch)])


def knn_accuracy(Ftr: torch.Tensor, ytr: torch.Tensor, Fte: torch.Tensor, yte: torch.Tensor, k: int = 5,
                 metric: str = "cosine", device=None) -> float:
    """k-NN accuracy with a majority vote (ties to the smaller label); ``metric`` "cosine" or "euclidean";
    computed on ``device`` (default :func:`lnbook.util.device.get_device`) whatever device the inputs are on."""
    device = resolve_device(device)
    Ftr, ytr, Fte, yte = (t.to(device) for t in (Ftr, ytr, Fte, yte))
    if metric == "cosine":
        a, b = nn.functional.normalize(Fte, dim=1), nn.functional.normalize(Ftr, dim=1)
        nearest = (a @ b.T).topk(k, dim=1).indices
    elif metric == "euclidean":
        nearest = torch.cdist(Fte, Ftr).topk(k, dim=1, largest=False).indices
    else:
        raise ValueError(f"metric must be 'cosine' or 'euclidean', got {metric!r}")
    votes = torch.nn.functional.one_hot(ytr[nearest], int(ytr.max()) + 1).sum(1)
    return float((votes.argmax(1) == yte).float().mean())


def few_shot_accuracy(Ftr: torch.Tensor, ytr: torch.Tensor, Fte: torch.Tensor, yte: torch.Tensor,
                      shots: int | None = 5, seed: int = 0) -> float:
    """Logistic-regression probe on standardised features with ``shots`` labelled examples per class
    (``None``: every training label); scikit-learn, so on the CPU whatever device the inputs are on."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    ytr_np = ytr.cpu().numpy()
    if shots is None:
        idx = np.arange(len(ytr_np))
    else:
        rng = np.random.default_rng(seed)
        idx = np.concatenate([rng.choice(np.flatnonzero(ytr_np == c), shots, replace=False) for c in np.unique(ytr_np)])
    scaler = StandardScaler().fit(Ftr[idx].cpu().numpy())
    clf = LogisticRegression(max_iter=2000).fit(scaler.transform(Ftr[idx].cpu().numpy()), ytr_np[idx])
    return float(clf.score(scaler.transform(Fte.cpu().numpy()), yte.cpu().numpy()))


def evaluate_run(run: SSLRun, Xtr, ytr, Xte, yte, shots: int = 5) -> dict:
    """Collapse and accuracy of a run, each on its representation.

    ``erank`` and ``top5`` (the share of the 5 largest covariance eigenvalues) are of the *embedding*: the
    projector output on the test set, before IterNorm (``emb`` wide). ``knn`` (5-NN), ``few_shot`` and ``probe``
    (logistic regression with ``shots`` or all labels) are of the *encoder features* (``feature_dim`` wide),
    as in the official evaluation, which probes the backbone.
    """
    Ftr, Fte = features(run.encoder, Xtr), features(run.encoder, Xte)
    Z = features(nn.Sequential(run.encoder, run.projector), Xte)
    return dict(method=run.method, T=run.T, axis=run.axis, seed=run.seed,
                erank=float(effective_rank(Z.double())), top5=float(top_eigenvalue_share(Z.double(), 5)), knn=knn_accuracy(Ftr, ytr, Fte, yte, 5),
                few_shot=few_shot_accuracy(Ftr, ytr, Fte, yte, shots, seed=run.seed),
                probe=few_shot_accuracy(Ftr, ytr, Fte, yte, None))
