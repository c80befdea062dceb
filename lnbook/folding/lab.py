"""Figures, models and summaries of chapter 7's labs (``notebooks/ch07_uniform_vector_lab.ipynb``,
``notebooks/ch07_folding_lab.ipynb``)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from lnbook.folding.ccc_training import RunResult
from lnbook.folding.uniform_angles import (
    UniformNull,
    angle_to_uniform,
    avoids,
    capture_norm_inputs,
    cosine_to_uniform,
    ln_rms_angle,
    orthogonality_verdict,
    random_mean_abs_cosine,
    stands_out,
)
from lnbook.ml.models import TinyTransformer
from lnbook.ml.text import CharVocabulary, next_token_windows, stdlib_docstrings
from lnbook.ml.training import evaluate, train

__all__ = ["ln_rms_angle_figure", "docstring_lm_data", "norm_inputs", "train_small_models", "null_figure",
           "null_summary", "ccc_figure", "ccc_summary"]


def ln_rms_angle_figure(seed: int = 0, d: int = 64, n: int = 400):
    """Left: the angle between LN(h) and RMS(h) measured from the outputs against ``|90 - theta|`` for ``n``
    random vectors with shifted means; right: the random baseline ``E|cos|``, exact and by Monte Carlo.
    Returns ``(figure, largest gap in degrees)``."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g, dtype=torch.float64) + torch.linspace(-2, 2, n, dtype=torch.float64)[:, None]
    theta, gap = angle_to_uniform(h).numpy(), ln_rms_angle(h).numpy()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
    axes[0].plot(theta, gap, ".", ms=3, label="measured from LN(h) and RMS(h)")
    t = np.linspace(theta.min(), theta.max(), 200)
    axes[0].plot(t, np.abs(90 - t), "k-", lw=0.8, label=r"$|90^\circ-\theta|$")
    axes[0].set(xlabel=r"angle $\theta$ between $h$ and $\mathbf{1}$ (degrees)", ylabel="angle between LN(h) and RMS(h)")
    axes[0].legend()
    ds = np.array([2, 4, 8, 16, 32, 64, 128, 256, 384, 576, 1024])
    axes[1].loglog(ds, [random_mean_abs_cosine(int(k)) for k in ds], "k-", lw=0.8, label="exact")
    mc = [float(cosine_to_uniform(torch.randn(20000, int(k), generator=g, dtype=torch.float64)).abs().mean()) for k in ds]
    axes[1].loglog(ds, mc, "o", ms=4, label="Monte Carlo, 20 000 directions")
    axes[1].set(xlabel="dimension d", ylabel=r"random $\mathbb{E}|\cos\theta|$")
    axes[1].legend()
    fig.tight_layout()
    return fig, float(np.abs(gap - np.abs(90 - theta)).max())


def docstring_lm_data(seq: int, n_windows: int, n_held_out: int = 256):
    """Character-level next-token windows of the standard library's docstrings: ``(vocab, (X, Y), (Xv, Yv))``,
    the held-out windows from the last 10% of the text."""
    text = stdlib_docstrings()
    vocab = CharVocabulary.from_text(text)
    ids = vocab.encode(text)
    split = int(0.9 * len(ids))
    return vocab, next_token_windows(ids[:split], seq, n_windows, seed=0), next_token_windows(ids[split:], seq, n_held_out, seed=1)


def norm_inputs(model: torch.nn.Module, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """What every norm of ``model`` receives on ``tokens`` (eval mode, one tensor per norm)."""
    with torch.no_grad(), capture_norm_inputs(model.eval()) as seen:
        model(tokens)
    return {k: torch.cat(v) for k, v in seen.items()}


def train_small_models(vocab, data, held_out, *, d_model: int, n_layers: int, epochs: int, device=None):
    """A LayerNorm and an RMSNorm TinyTransformer (seed 0) trained on ``data``: ``{norm: (states at
    initialisation, states after training, held-out loss)}``, states of the held-out windows."""
    out = {}
    X, Y = data
    for norm in ("ln", "rms"):
        torch.manual_seed(0)
        model = TinyTransformer(vocab.size, d_model, 4, n_layers, max_len=X.shape[1], norm=norm)
        init = norm_inputs(model, held_out[0])
        train(model, X, Y, epochs=epochs, task="next_token", batch_size=32, optimizer="adamw", lr=3e-3,
              log_every=epochs, label=f"TinyTransformer, {norm}", device=device)
        model = model.cpu()
        loss, _ = evaluate(model, *held_out, "next_token")
        out[norm] = (init, norm_inputs(model, held_out[0]), loss)
    return out


def null_figure(series: dict[str, list[UniformNull]], init: dict[str, list[UniformNull]] | None = None):
    """One panel per model: per layer, the mean |cos| of the states with 1 (dots) and the 5-95% band of the
    same statistic for random directions (grey), all divided by the null's median; dotted: at initialisation."""
    fig, axes = plt.subplots(1, len(series), figsize=(3.2 * len(series), 3.0), squeeze=False)
    for ax, (name, rows) in zip(axes[0], series.items()):
        depth = np.arange(len(rows))
        med = np.array([r.null_quantile(0.5) for r in rows])
        lo, hi = np.array([r.null_quantile(0.05) for r in rows]), np.array([r.null_quantile(0.95) for r in rows])
        ax.fill_between(depth, lo / med, hi / med, color="0.85", label="random directions, 5-95%")
        ax.plot(depth, [r.uniform_abs_cos for r in rows] / med, "o-", ms=3, label=r"uniform direction $\mathbf{1}$")
        if init and name in init:
            ax.plot(depth, [r.uniform_abs_cos / r.null_quantile(0.5) for r in init[name]], ":", color="C1",
                    label="at initialisation")
        ax.axhline(1, color="k", lw=0.6)
        ax.set(title=name, xlabel="norm layer (depth order)", yscale="log")
    axes[0][0].set_ylabel("mean |cos| / median of random directions")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def null_summary(rows: list[UniformNull]) -> dict[str, str]:
    """The strings the chapter quotes for one model: layers where 1 stands out / is avoided, the range of
    percentiles, and the verdict's words."""
    lean, avoid, words = orthogonality_verdict(rows)
    pct = [r.percentile for r in rows]
    return {"lean": f"{sum(stands_out(r) for r in rows)} of {len(rows)}",
            "avoid": f"{sum(avoids(r) for r in rows)} of {len(rows)}",
            "percentiles": f"{min(pct):.0f} to {max(pct):.0f}",
            "words": words, "lean_share": lean, "avoid_share": avoid}


def ccc_summary(runs: list[RunResult], times: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per variant: mean and spread (max - min) of the held-out loss over seeds, mean training seconds,
    inference seconds, largest stream mean."""
    out = {}
    for variant in dict.fromkeys(r.variant for r in runs):
        mine = [r for r in runs if r.variant == variant]
        held = [r.held_out_loss for r in mine]
        out[variant] = {"loss": float(np.mean(held)), "spread": float(max(held) - min(held)),
                        "train_s": float(np.mean([r.train_seconds for r in mine])), "infer_s": times[variant],
                        "stream_mean": max(r.stream_mean for r in mine), "seeds": len(mine)}
    return out


def ccc_figure(runs: list[RunResult], summary: dict[str, dict[str, float]]):
    """Left: training loss per step (every seed); right: held-out loss per seed, per variant."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.2))
    colours = {v: f"C{i}" for i, v in enumerate(summary)}
    for r in runs:
        smooth = np.convolve(r.losses, np.ones(10) / 10, mode="valid")
        a.plot(smooth, color=colours[r.variant], lw=0.8, label=r.variant if r.seed == runs[0].seed else None)
    a.set(xlabel="step", ylabel="training loss (nats/char, 10-step mean)")
    a.legend()
    for i, v in enumerate(summary):
        held = [r.held_out_loss for r in runs if r.variant == v]
        b.plot([i] * len(held), held, "o", color=colours[v])
    b.set_xticks(range(len(summary)), list(summary))
    b.set(ylabel="held-out loss (nats/char)", xlim=(-0.5, len(summary) - 0.5))
    fig.tight_layout()
    return fig


def degrees_from_ninety(d: int) -> float:
    """The angle from 90 degrees of a direction with |cos| equal to the random baseline in R^d."""
    return math.degrees(math.asin(random_mean_abs_cosine(d)))
