"""Figures, models and summaries of chapter 7's labs (``notebooks/ch07_uniform_vector_lab.ipynb``,
``notebooks/ch07_folding_lab.ipynb``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import matplotlib.lines
import matplotlib.ticker
import numpy as np
import torch

from lnbook.folding.ccc_training import RunResult
from lnbook.folding.speed import without_shape_guards
from lnbook.folding.uniform_angles import (
    UniformNull,
    angle_profile,
    group_by_source,
    angle_to_uniform,
    avoids,
    capture_norm_inputs,
    cosine_to_uniform,
    ln_rms_angle,
    null_profile,
    orthogonality_verdict,
    random_mean_abs_cosine,
    stands_out,
)
from lnbook.ml.models import TinyTransformer
from lnbook.ml.text import CharVocabulary, next_token_windows, stdlib_docstrings
from lnbook.util.tables import Details, Table, number_range, power_of_ten
from lnbook.ml.training import evaluate, train

__all__ = ["ln_rms_angle_figure", "docstring_lm_data", "norm_inputs", "train_small_models", "null_figure",
           "null_summary", "null_table", "profiles_over_seeds", "pretrained_nulls", "minilm_init_nulls", "ccc_figure", "ccc_summary", "paired_gap", "FOLD_DIFFERENCES",
           "fold_differences_table", "writers_table", "small_models_table", "ccc_table", "SMALL_SEEDS", "SmallRun",
           "seeds_summary", "paired_seed_comparison", "weak_reading_uninformative_over_seeds", "small_seeds_figure"]


_ANGLE_BASELINE_TICKS = (0.03, 0.1, 0.3)  # the right panel's labelled values of E|cos|, d from 2 to 1024


def ln_rms_angle_figure(seed: int = 0, d: int = 64, n: int = 400):
    """Left: the angle between LN(h) and RMS(h) measured from the outputs against ``|90 - theta|`` for ``n``
    random vectors with shifted means; right: the random baseline ``E|cos|``, exact and by Monte Carlo.
    Returns ``(figure, largest gap in degrees)``."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g, dtype=torch.float64) + torch.linspace(-2, 2, n, dtype=torch.float64)[:, None]
    theta, gap = angle_to_uniform(h).cpu().numpy(), ln_rms_angle(h).cpu().numpy()
    from lnbook.util.plotting import COLUMN_WIDTH_IN

    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH_IN, 3.4))  # the column's width: its text readable there
    axes[0].plot(theta, gap, ".", ms=3, label="measured")  # from LN(h) and RMS(h): the caption says so
    t = np.linspace(theta.min(), theta.max(), 200)
    axes[0].plot(t, np.abs(90 - t), "k-", lw=0.8, label="|90° − θ|")  # the degree sign as text: mathtext's ^\circ floats
    axes[0].set(xlabel=r"angle $\theta$ between $h$ and $\mathbf{1}$ (deg.)", ylabel="angle between LN(h) and RMS(h)")
    top = float(np.abs(90 - theta).max())
    axes[0].set_ylim(-3, 1.45 * top)  # room above the arms of the V, where the legend goes: on no data
    axes[0].legend(loc="upper center", ncol=2)
    ds = np.array([2, 4, 8, 16, 32, 64, 128, 256, 384, 576, 1024])
    axes[1].loglog(ds, [random_mean_abs_cosine(int(k)) for k in ds], "k-", lw=0.8, label="exact")
    mc = [float(cosine_to_uniform(torch.randn(20000, int(k), generator=g, dtype=torch.float64)).abs().mean()) for k in ds]
    axes[1].loglog(ds, mc, "o", ms=4, label="Monte Carlo,\n20 000 directions")
    axes[1].set(xlabel="dimension $d$", ylabel=r"random $\mathbb{E}|\cos\theta|$")
    # a few plain ticks, not the crowded minor labels (6×10⁻¹ 4×10⁻¹ 3×10⁻¹ ...) of a log axis under one decade
    axes[1].set_yticks(_ANGLE_BASELINE_TICKS, [f"{t:g}" for t in _ANGLE_BASELINE_TICKS])
    axes[1].yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[1].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
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


SMALL_SEEDS = (0, 1, 2)  # the small Transformers' seeds: three per norm (referee 20 of chapter 7, finding 8)


@dataclass(frozen=True)
class SmallRun:
    """One small Transformer of the uniform-vector lab: its norm (``"ln"`` or ``"rms"``), its seed, its held-out loss
    (nats per character), and its layers' :class:`~lnbook.folding.uniform_angles.UniformNull` rows after training and
    at initialisation, on the held-out windows."""

    norm: str
    seed: int
    loss: float
    trained: tuple[UniformNull, ...]
    initial: tuple[UniformNull, ...]


def _check_seeds(seeds) -> tuple[int, ...]:
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise TypeError(f"seeds must be a sequence of whole numbers, e.g. (0, 1, 2), got {seeds!r}")
    seeds = tuple(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
        raise ValueError(f"seeds must be a non-empty sequence of whole numbers >= 0, e.g. (0, 1, 2), got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct (a repeated seed trains the same model twice), got {seeds!r}")
    return seeds


def train_small_models(vocab, data, held_out, *, d_model: int, n_layers: int, epochs: int, seeds=SMALL_SEEDS,
                       n_directions: int = 500, device=None) -> dict[str, list[SmallRun]]:
    """A LayerNorm and an RMSNorm TinyTransformer per seed, trained on ``data``: ``{norm: [SmallRun per seed]}``.
    Seed ``s`` fixes the initial weights (``torch.manual_seed(s)``) and the order of the batches (``train(seed=s)``), so
    the LayerNorm and the RMSNorm model of one seed start from the same weights and see the same batches (the seeds
    pair the norms), and a run is deterministic. The norm inputs on the held-out windows, before and after training,
    are measured against :func:`~lnbook.folding.uniform_angles.null_profile`'s ``n_directions`` random directions (its
    seed 0 for every model: the same directions measure every seed) as soon as they are taken, so that only the
    summaries are kept (the states of seventeen norms of a paper-scale model, per seed, would not fit in memory)."""
    seeds = _check_seeds(seeds)
    out = {}
    X, Y = data
    for norm in ("ln", "rms"):
        out[norm] = []
        for seed in seeds:
            torch.manual_seed(seed)
            model = TinyTransformer(vocab.size, d_model, 4, n_layers, max_len=X.shape[1], norm=norm)
            initial = null_profile(norm_inputs(model, held_out[0]), n_directions=n_directions)
            train(model, X, Y, epochs=epochs, task="next_token", batch_size=32, optimizer="adamw", lr=3e-3, seed=seed,
                  log_every=epochs, label=f"TinyTransformer, {norm}, seed {seed}", report=False, device=device)
            model = model.cpu()
            loss, _ = evaluate(model, *held_out, "next_token")
            trained = null_profile(norm_inputs(model, held_out[0]), n_directions=n_directions)
            out[norm].append(SmallRun(norm, seed, float(loss), tuple(trained), tuple(initial)))
    return out


def _check_runs(runs, who: str) -> list:
    if not isinstance(runs, (list, tuple)) or not runs or not all(isinstance(r, SmallRun) for r in runs):
        raise TypeError(f"{who} needs a non-empty list of SmallRun (one norm's entry of train_small_models' result)")
    return list(runs)


def _count_over_seeds(counts: list[int], n: int) -> str:
    """Layer counts of several seeds as one phrase: ``"0 of 5"`` when every seed has the same, else ``"0–2 of 5"``."""
    return f"{number_range(min(counts), max(counts), 'd')} of {n}"


def seeds_summary(runs: list[SmallRun], when: str = "trained", alpha: float = 0.05) -> dict:
    """What the chapter quotes of one norm's seeds (``when``: ``"trained"`` or ``"initial"``): the layers where 1
    stands out and where the states avoid it, each seed tested at level ``alpha / n`` for ``n`` seeds
    (:func:`null_summary` per seed; Bonferroni), so that "1 stands out in some layer of some seed" has family-wise level
    at most ``alpha`` over all the seeds' layers under any dependence between the seeds (a union bound; at ``alpha`` per
    seed it could reach ``n * alpha``, since the seeds share the held-out text and the directions: referee 27 of chapter
    7, finding 6, and 28, finding 4; ``"alpha_per_seed"`` says the level used), over the
    seeds (``"0 of 5"`` in every seed, ``"0–1 of 5"`` otherwise); the percentile range of each seed in seed order
    (``"3–55, 1–73 and 5–92"``); the lowest and the highest percentile of each seed (lists of whole percentiles, as
    printed, so that 73.0 and 73.4 compare equal as the reader sees them, and their ranges over the seeds as strings); and the largest share of layers leaning towards 1 over the seeds (``lean_share``, 0 only when
    1 stands out in no layer of any seed)."""
    runs = _check_runs(runs, "seeds_summary")
    if when not in ("trained", "initial"):
        raise ValueError(f"when must be 'trained' or 'initial', got {when!r}")
    rows = [getattr(r, when) for r in runs]
    n = {len(x) for x in rows}
    if len(n) != 1:
        raise ValueError(f"the seeds' models have different numbers of norm layers ({sorted(n)}): train them with one "
                         "configuration")
    n = n.pop()
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    alpha_per_seed = alpha / len(rows)
    per_seed = [null_summary(list(x), alpha_per_seed) for x in rows]
    lowest = [round(min(r.percentile for r in x)) for x in rows]  # whole percentiles, as printed: a comparison of
    highest = [round(max(r.percentile for r in x)) for x in rows]  # the norms then never contradicts the printed values
    ranges = [number_range(lo, hi, "d") for lo, hi in zip(lowest, highest)]
    return {"seeds": [r.seed for r in runs], "per_seed": per_seed, "alpha_per_seed": alpha_per_seed,
            "lean": _count_over_seeds([round(s["lean_share"] * n / 100) for s in per_seed], n),
            "avoid": _count_over_seeds([round(s["avoid_share"] * n / 100) for s in per_seed], n),
            "percentiles": ranges[0] if len(ranges) == 1 else ", ".join(ranges[:-1]) + " and " + ranges[-1],
            "lowest": lowest, "highest": highest,
            "lowest-range": number_range(min(lowest), max(lowest), "d"),
            "highest-range": number_range(min(highest), max(highest), "d"),
            "lean_share": max(s["lean_share"] for s in per_seed)}


def paired_seed_comparison(a, b, seeds, what: str = "the lowest percentile", names=("LayerNorm", "RMSNorm")) -> dict:
    """Compare a statistic of two norms seed by seed (``a[k]`` and ``b[k]`` from seed ``seeds[k]``, which gives both
    norms the same initial weights and batches, so the seeds pair them). Returns ``{"lower": k, "higher": k, "ties": k,
    "chance": p, "chance_words": "1/4", "words": clause}``: how many seeds have ``a`` below / above ``b``, and ``p``, the
    chance that all the seeds fall on one side (either) when the norm does not matter, so that the sign within each
    pair is a fair coin: ``2 / 2**n`` for ``n`` seeds (a sign test; 1/4 for three seeds, so no outcome of three seeds
    shows a difference at level 5%), with ``chance_words`` the same as a fraction. ``words`` is the clause the chapter
    prints: "the lowest percentile is lower with LayerNorm than with RMSNorm in each of the 3 seeds", or, when the
    seeds fall on both sides or tie, "... lower with LayerNorm than with RMSNorm in 2 and higher in none of the 3 seeds
    (equal in 1), so the seeds do not separate the two norms"."""
    seeds = _check_seeds(seeds)
    a, b = [float(v) for v in a], [float(v) for v in b]
    if not len(a) == len(b) == len(seeds):
        raise ValueError(f"give one value per seed for each norm: {len(a)} and {len(b)} values for {len(seeds)} seeds")
    if not all(math.isfinite(v) for v in a + b):
        raise ValueError(f"the values must be finite, got {a} and {b}")
    n = len(seeds)
    lower, higher = sum(x < y for x, y in zip(a, b)), sum(x > y for x, y in zip(a, b))
    ties = n - lower - higher
    chance = 2.0 / 2 ** n
    chance_words = f"1/{2 ** (n - 1)}" if n > 1 else "1"
    first, second = names
    if lower == n or higher == n:
        side = "lower" if lower == n else "higher"
        words = f"{what} is {side} with {first} than with {second} in each of the {n} seeds"
    else:
        count = lambda k: "none" if k == 0 else str(k)  # noqa: E731
        words = (f"{what} is lower with {first} than with {second} in {count(lower)} and higher in {count(higher)} of the "
                 f"{n} seeds" + (f" (equal in {ties})" if ties else "") + ", so the seeds do not separate the two norms")
    return {"lower": lower, "higher": higher, "ties": ties, "chance": chance, "chance_words": chance_words, "words": words}


def weak_reading_uninformative_over_seeds(trained: list[dict], initial: list[dict]) -> str:
    """:func:`weak_reading_uninformative` over a norm's seeds (seed ``k``'s trained :func:`null_summary` against its own
    initialisation's): ``""`` (the record is kept) when some seed's verdict is informative (1 stands out in a trained
    layer, or the initialisation gives another verdict); else why the record is not checkable here, for every seed."""
    if not isinstance(trained, (list, tuple)) or not isinstance(initial, (list, tuple)) or not trained:
        raise TypeError("trained and initial must be non-empty lists of null_summary(...) dicts, one per seed")
    if len(trained) != len(initial):
        raise ValueError(f"give one initialisation summary per seed: {len(trained)} trained and {len(initial)} initial")
    reasons = [weak_reading_uninformative(s, s0) for s, s0 in zip(trained, initial)]
    if not all(reasons):
        return ""
    if len(reasons) == 1:
        return reasons[0]
    counts = ", ".join(s0["lean"] for s0 in initial)
    return (f"not informative in any of the {len(reasons)} seeds: {_TYPICAL}, "
            f"and in every seed the same architecture at initialisation gets the same verdict as the trained model "
            f"({counts} layers lean towards $\\one$, seed by seed), so it does not test what training did")


# mantissas tried in turn for the labelled ticks of a log axis, from one per decade to a fine set
_LOG_TICK_MANTISSAS = ((1,), (1, 2, 5), (1, 2, 3, 5), (1, 1.5, 2, 3, 5, 7), (1, 1.2, 1.5, 2, 3, 4, 5, 6, 7, 8, 9))
_MOST_LOG_TICKS = 6  # labels on one log axis at most, so that they stay apart at the column width


def _plain_log_ticks(ax, least: int = 3) -> list[float]:
    """Label a log y axis at a few round values inside its drawn range (``0.2, 0.5, 1, 2``; the first set of
    :data:`_LOG_TICK_MANTISSAS` that gives ``least`` of them), written as plain numbers, and no minor tick labels:
    an axis under two decades otherwise labels every minor tick (``6×10⁻¹ 4×10⁻¹ 3×10⁻¹``), crowded at the column
    width. Returns the labelled values."""
    low, high = ax.get_ylim()
    if not 0 < low < high:
        raise ValueError(f"a log axis has positive limits low < high, got {low!r} and {high!r}")
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    for mantissas in _LOG_TICK_MANTISSAS:
        ticks = [m * 10.0 ** e for e in decades for m in mantissas if low <= m * 10.0 ** e <= high]
        if len(ticks) >= least:
            break
    if len(ticks) > _MOST_LOG_TICKS:  # many decades: every k-th power of ten, 1 among them
        step = math.ceil(len(ticks) / _MOST_LOG_TICKS)
        ticks = [t for t in ticks if round(math.log10(t)) % step == 0]
    labels = [f"{t:.4g}" if 1e-3 <= t < 1e4 else power_of_ten(t, ".0p" if float(f"{t:.0e}") == t else ".1p")
              for t in ticks]
    ax.set_yticks(ticks, labels)
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylim(low, high)
    return ticks


def null_figure(series: dict[str, list[UniformNull]], init: dict[str, list[UniformNull]] | None = None):
    """One panel per model: per layer, the mean |cos| of the states with 1 (dots) and the 5–95% band of the
    same statistic for random directions (grey), all divided by the null's median; dotted: at initialisation.
    At most the book's column wide, the legend below the panels, its text readable there
    (:func:`lnbook.util.plotting.readability_problems`)."""
    from lnbook.util.plotting import COLUMN_WIDTH_IN, MIN_FONT_PT

    fig, axes = plt.subplots(1, len(series), figsize=(min(COLUMN_WIDTH_IN, 3.4 * len(series)), 3.4), squeeze=False)
    for ax, (name, rows) in zip(axes[0], series.items()):
        depth = np.arange(len(rows))
        med = np.array([r.null_quantile(0.5) for r in rows])
        lo, hi = np.array([r.null_quantile(0.05) for r in rows]), np.array([r.null_quantile(0.95) for r in rows])
        ax.fill_between(depth, lo / med, hi / med, color="0.85", label="random directions, 5–95%")
        ax.plot(depth, [r.uniform_abs_cos for r in rows] / med, "o-", ms=3, label=r"uniform direction $\mathbf{1}$")
        if init and name in init:
            ax.plot(depth, [r.uniform_abs_cos / r.null_quantile(0.5) for r in init[name]], ":", color="C1",
                    label="at initialisation")
        ax.axhline(1, color="k", lw=0.6)
        ax.set(title=name, xlabel="norm layer (depth order)", yscale="log")
        _plain_log_ticks(ax)  # a few plain values (0.5, 1, 2), not the minor labels 6×10⁻¹ 4×10⁻¹ 3×10⁻¹
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True, steps=[1, 2, 5, 10]))  # 0, 5, 10, not 2.5 or 8
    axes[0][0].set_ylabel("mean |cos| (relative)")  # relative to the median of random directions: the caption says so
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.legend(handles, labels, loc="lower center", ncol=len(handles), fontsize=MIN_FONT_PT)
    return fig


def _per_layer_words(above: int, below: int, n: int) -> str:
    """The per-layer counts as the clause after "Layer by layer, 1 is": "in none of the 61 layers above the 95th
    percentile or below the 5th, where chance alone would put about 3 in each", or, when some layer is, "above the 95th
    percentile in 2 and below the 5th in none of the 61 layers, ..." (a clause, not a bracket inside a bracket; "in 0
    and below the 5th in 0 of the 61 layers ... about 3.1" read as a draft: screenshot reads, issue 33)."""
    chance = f", where chance alone would put about {0.05 * n:.1g} in each"
    if above == below == 0:
        return f"in none of the {n} layers above the 95th percentile or below the 5th" + chance
    count = lambda k: "none" if k == 0 else str(k)  # noqa: E731
    return f"above the 95th percentile in {count(above)} and below the 5th in {count(below)} of the {n} layers" + chance


def null_summary(rows: list[UniformNull], alpha: float = 0.05) -> dict[str, str]:
    """The strings the chapter quotes for one model: layers where 1 stands out / is avoided at family-wise
    level ``alpha`` (:func:`orthogonality_verdict`), the same counts layer by layer at the 95th / 5th
    percentile with the number expected there by chance, the range of percentiles, and the verdict's words."""
    lean, avoid, words = orthogonality_verdict(rows, alpha)
    n, pct = len(rows), [r.percentile for r in rows]
    return {"lean": f"{round(lean * n / 100)} of {n}", "avoid": f"{round(avoid * n / 100)} of {n}",
            "per-layer": _per_layer_words(sum(stands_out(r) for r in rows), sum(avoids(r) for r in rows), n),
            "percentiles": number_range(min(pct), max(pct), ".0f"),  # an en dash, as the tables (issue 33)
            "words": words, "lean_share": lean, "avoid_share": avoid}


_TYPICAL = ("the weak reading ($\\one$ stands out in no layer) is the acceptance region of a level-5% test whose null "
            "is '$\\one$ is a typical direction', so states in which $\\one$ is typical meet it with probability 95% or more")


def pretrained_nulls(texts: list[str], *, n_directions: int, draws=(0,), loaders=None,
                     sources: list | None = None) -> tuple[dict, dict]:
    """Feed ``texts`` to each pretrained model of ``loaders`` (``{name: loader}``, default MiniLM and SmolLM2 from
    :mod:`lnbook.folding.pretrained`) and measure its norm inputs against the uniform direction: ``(pretrained,
    redrawn)`` with ``pretrained[name] = (angle_profile, null_profile)`` (the null of the first draw) and
    ``redrawn[name]`` the null profiles under every seed of ``draws`` (other random directions, the same states).
    The angle profiles carry the spread of the signed mean over texts (at least 2), or over sources when ``sources``
    labels each text with its source (:func:`~lnbook.folding.uniform_angles.group_by_source`; at least 2 sources).
    Each model is freed before the next is loaded."""
    from lnbook.folding.pretrained import load_minilm, load_smollm2, run_texts

    draws = _check_seeds(draws)
    loaders = {"MiniLM": load_minilm, "SmolLM2": load_smollm2} if loaders is None else loaders
    pretrained, redrawn = {}, {}
    for name, loader in loaders.items():
        model, tokenizer = loader()
        by_text = run_texts(model, tokenizer, texts, by_text=True)  # the spread of the signed mean is over texts
        states = {layer: torch.cat(parts) for layer, parts in by_text.items()}
        redrawn[name] = [null_profile(states, n_directions=n_directions, seed=s) for s in draws]
        if sources is not None:  # texts of one source are not independent draws: the spread is over sources
            by_text = {layer: group_by_source(parts, sources) for layer, parts in by_text.items()}
        pretrained[name] = (angle_profile(by_text), redrawn[name][0])
        del model, states, by_text
    return pretrained, redrawn


def minilm_init_nulls(texts: list[str], *, n_directions: int, draws=(0,)) -> list[list[UniformNull]]:
    """The control of the uniform-vector section: MiniLM's architecture at initialisation
    (:func:`~lnbook.folding.pretrained.minilm_at_initialisation`, LayerNorm gains 1 and biases 0), one model per seed
    of ``draws``, each fed ``texts`` and measured with :func:`~lnbook.folding.uniform_angles.null_profile` (seed 0 of
    the random directions): one null profile per draw of the weights."""
    from lnbook.folding.pretrained import minilm_at_initialisation, run_texts

    out = []
    for seed in _check_seeds(draws):
        model, tokenizer = minilm_at_initialisation(seed=seed)
        out.append(null_profile(run_texts(model, tokenizer, texts), n_directions=n_directions))
        del model
    return out


def profiles_over_seeds(profiles: list[list[UniformNull]], alpha: float = 0.05) -> dict:
    """One model's (or one architecture's) verdicts over several draws: ``profiles[k]`` is a
    :func:`~lnbook.folding.uniform_angles.null_profile` of draw ``k`` (other random directions, or other random weights
    of the same architecture), each tested on its own at family-wise level ``alpha`` over its layers. Returns
    ``{"per_seed": [null_summary, ...], "lean": "0 of 13", "avoid": "11\u201312 of 13", "percentiles":
    "0\u201322, 0\u201353 and 0\u201391"}``: a count where every draw has it, else its range, and each draw's range of
    percentiles in draw order. A verdict from one draw is an anecdote (referee 27 of chapter 7, finding 8)."""
    if not isinstance(profiles, (list, tuple)) or not profiles or not all(
            isinstance(x, (list, tuple)) and x and all(isinstance(r, UniformNull) for r in x) for x in profiles):
        raise TypeError("profiles must be a non-empty list of null_profile(...) results, one per draw")
    n = {len(x) for x in profiles}
    if len(n) != 1:
        raise ValueError(f"the draws have different numbers of layers ({sorted(n)}): profile one model or architecture")
    n = n.pop()
    per_seed = [null_summary(list(x), alpha) for x in profiles]
    ranges = [s["percentiles"] for s in per_seed]
    return {"per_seed": per_seed,
            "lean": _count_over_seeds([round(s["lean_share"] * n / 100) for s in per_seed], n),
            "avoid": _count_over_seeds([round(s["avoid_share"] * n / 100) for s in per_seed], n),
            "percentiles": ranges[0] if len(ranges) == 1 else ", ".join(ranges[:-1]) + " and " + ranges[-1]}


def weak_reading_uninformative(trained: dict, init: dict | None) -> str:
    """Why the weak reading's record ("1 stands out in no layer") of a model is not checkable here, or ``""`` when
    its initialisation control separates it. Its verdict is the acceptance region of a level-5% test whose null is
    "1 is a typical direction", so states in which 1 is typical meet it with probability 95% or more: a verdict that
    the same architecture at initialisation (``init``, a :func:`null_summary`) also gets says nothing of what
    training did, and without such a control (``init=None``) nothing separates it either (referee 18 of chapter 7,
    finding 3). A verdict that differs from the initialisation's is kept (``""``). The rule applies to acceptances
    only: a trained model in which 1 stands out in some layer (``lean_share > 0``) rejects the weak reading at level
    5% whatever the initialisation does, so it is always kept (``""``, referee 19 of chapter 7, finding 4)."""
    if not isinstance(trained, dict) or "lean_share" not in trained:
        raise TypeError("trained must be a null_summary(...) dict (with 'lean_share')")
    if init is not None and (not isinstance(init, dict) or "lean_share" not in init):
        raise TypeError("init must be a null_summary(...) dict of the model at initialisation, or None when no "
                        "initialisation control was run")
    typical = _TYPICAL
    if trained["lean_share"] > 0:  # a rejection of the weak reading: informative with or without a control
        return ""
    if init is None:
        return f"not informative: {typical}, and no initialisation control was run for this model"
    if init["lean_share"] == trained["lean_share"]:
        return (f"not informative: {typical}, and the same architecture at initialisation gets the same verdict "
                f"({init['lean']} layers lean towards $\\one$), so it does not test what training did")
    return ""


ONE = "𝟏"  # the uniform vector as the chapter's bold 1 (MATHEMATICAL BOLD DIGIT ONE) in table headers


def null_table(series: dict[str, list[UniformNull]], alpha: float = 0.05):
    r"""One row per model (a :class:`lnbook.util.tables.Table`): the layers where :math:`\mathbf 1` stands out and where
    the states avoid it at family-wise level ``alpha``, each out of its norm layers (``"1 of 13"``: :func:`null_summary`),
    and the lowest and highest percentile of :math:`\mathbf 1` among the random
    directions over its layers, as one range (``3–97``; one value where both are the same). The headers write the
    vector as the chapter's bold :math:`\mathbf 1` (the character 𝟏, U+1D7CF), so that it does not read as the number one
    (screenshot read 42). Four columns: with a column for the number of layers (which each count says) and the lowest and
    highest percentile in columns of their own, the lab's second table (a loss column beside them) had seven and
    wrapped (screenshot read, issue 33)."""
    if not series:
        raise ValueError("series is empty: pass {model name: its layers' UniformNull rows}")
    rows = []
    for name, nulls in series.items():
        s, pct = null_summary(nulls, alpha), [r.percentile for r in nulls]
        rows.append({"model": name, f"{ONE} stands out": s["lean"], f"{ONE} avoided": s["avoid"],
                     f"{ONE} percentiles": number_range(round(min(pct)), round(max(pct)), "d")})  # short headers
    return Table(rows, list(rows[0]))


def small_models_table(small: dict, norms=("ln", "rms")) -> Table:
    """The small Transformers' table, over their seeds: one row per norm, trained and at initialisation (``"LN,
    trained"``, ``"LN, initial"``, ...), with the columns of :func:`null_table` and the held-out loss in nats per
    character (three decimals; none at initialisation). Every cell shows the range over the seeds and folds each seed's
    value under it (:class:`lnbook.util.tables.Details`, as :func:`lnbook.util.tables.seed_range`): a layer count is one
    count when every seed has it (``"0 of 5"``), and the percentiles' cell spans every seed's layers. ``small`` is
    :func:`train_small_models`' result, ``{norm: [SmallRun per seed]}``."""
    if not isinstance(small, dict):
        raise TypeError("small must be train_small_models' result, {norm: [SmallRun per seed]}")
    missing = [n for n in norms if n not in small]
    if missing:
        raise ValueError(f"no small models for {missing}; the norms are {list(norms)}")
    rows = []
    for norm in norms:
        runs = _check_runs(small[norm], "small_models_table")
        seeds = [r.seed for r in runs]
        for when in ("trained", "initial"):
            s = seeds_summary(runs, when)
            per = lambda key: [f"seed {k}: {x[key]}" for k, x in zip(seeds, s["per_seed"])]  # noqa: E731
            low, high = min(s["lowest"]), max(s["highest"])
            loss = (Details(number_range(min(r.loss for r in runs), max(r.loss for r in runs), ".3f"),
                            [f"seed {r.seed}: {r.loss:.3f}" for r in runs]) if when == "trained" else None)
            rows.append({"model": f"{norm.upper()}, {when}", "loss (nats/char)": loss,
                         f"{ONE} stands out": Details(s["lean"], per("lean")),
                         f"{ONE} avoided": Details(s["avoid"], per("avoid")),
                         f"{ONE} percentiles": Details(number_range(round(low), round(high), "d"),
                                                       [f"seed {k}: {x['percentiles']}" for k, x in zip(seeds, s["per_seed"])])})
    return Table(rows, list(rows[0]))


def small_seeds_figure(small: dict, norms=("ln", "rms")):
    """One panel per norm (``small``: :func:`train_small_models`' result): per layer and per seed, the mean |cos| of the
    trained model's states with 1 divided by the median of its random directions (one line per seed, solid), the same at
    initialisation (dotted, the seed's colour), and in grey the band from the lowest 5% to the highest 95% quantile of
    the random directions over the seeds (each divided by its median). At most the book's column wide, the legend below
    the panels, its text readable there (:func:`lnbook.util.plotting.readability_problems`)."""
    from lnbook.util.plotting import COLUMN_WIDTH_IN, MIN_FONT_PT

    if not isinstance(small, dict) or any(n not in small for n in norms):
        raise ValueError(f"small must be train_small_models' result with the norms {list(norms)}")
    fig, axes = plt.subplots(1, len(norms), figsize=(min(COLUMN_WIDTH_IN, 3.4 * len(norms)), 3.6), squeeze=False)
    for ax, norm in zip(axes[0], norms):
        runs = _check_runs(small[norm], "small_seeds_figure")
        depth = np.arange(len(runs[0].trained))
        rel = lambda rows, q: np.array([r.null_quantile(q) / r.null_quantile(0.5) for r in rows])  # noqa: E731
        lo = np.min([rel(r.trained, 0.05) for r in runs] + [rel(r.initial, 0.05) for r in runs], axis=0)
        hi = np.max([rel(r.trained, 0.95) for r in runs] + [rel(r.initial, 0.95) for r in runs], axis=0)
        ax.fill_between(depth, lo, hi, color="0.85", label="random directions, 5–95%")
        for k, run in enumerate(runs):
            colour = f"C{k}"
            ax.plot(depth, [r.uniform_abs_cos / r.null_quantile(0.5) for r in run.trained], "o-", ms=3, color=colour,
                    label=f"seed {run.seed}")
            ax.plot(depth, [r.uniform_abs_cos / r.null_quantile(0.5) for r in run.initial], ":", color=colour)
        ax.axhline(1, color="k", lw=0.6)
        ax.set(title=f"small {norm.upper()}", xlabel="norm layer (depth order)", yscale="log")
        _plain_log_ticks(ax)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
    axes[0][0].set_ylabel("mean |cos| (relative)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    handles.append(matplotlib.lines.Line2D([], [], ls=":", color="0.3"))
    labels.append("at initialisation")
    fig.tight_layout(rect=(0, 0.15, 1, 1))  # room below for the legend's two rows, no more
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(handles)), fontsize=MIN_FONT_PT)
    return fig


def ccc_summary(runs: list[RunResult], times: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per variant: mean and spread (max - min) of the held-out loss over seeds, mean training seconds,
    inference seconds, largest stream mean. Refuses runs in which the variants did not all run on the same seeds (the
    lab's table gives one seed count in its header; the check was an assert in the lab's cell: screenshot read, issue
    33)."""
    seeds = {v: sorted(r.seed for r in runs if r.variant == v) for v in dict.fromkeys(r.variant for r in runs)}
    if len({tuple(s) for s in seeds.values()}) > 1:
        raise ValueError(f"every variant must run on the same seeds, got {seeds}")
    out = {}
    for variant in dict.fromkeys(r.variant for r in runs):
        mine = [r for r in runs if r.variant == variant]
        held = [r.held_out_loss for r in mine]
        out[variant] = {"loss": float(np.mean(held)), "spread": float(max(held) - min(held)),
                        "train_s": float(np.mean([r.train_seconds for r in mine])), "infer_s": times[variant],
                        "stream_mean": max(r.stream_mean for r in mine), "seeds": len(mine)}
    return out


def paired_gap(runs: list[RunResult], variant: str, reference: str = "ln") -> dict[str, float | str]:
    """Seed-paired held-out loss differences ``variant - reference``: their mean (``gap``, and in % of the
    reference's mean loss), their spread (max - min over seeds), the seed spread of the losses themselves
    (the smaller of the two variants' max - min) and the verdict:

    * ``"indistinguishable at this scale"`` when ``|gap| <= spread`` (the mean difference lies inside the
      seed-to-seed scatter of the paired differences);
    * ``"consistent in sign, smaller than the seed spread"`` when the paired differences agree in sign but
      ``|gap|`` is below the seed spread of the losses: not resolved (with ``n`` seeds a sign shared by all of them has
      a two-sided sign-test p-value of ``2^(1-n)``, 0.25 with the lab's three);
    * ``"larger than the seed spread, one sign in all n seeds (sign-test p = 2^(1-n))"`` otherwise, with ``n`` and the
      p-value written out: the word "differs" would overstate what a few seeds show (referee 27 of chapter 7).

    Needs the same seeds (at least two) for both variants."""
    by = {v: {r.seed: r.held_out_loss for r in runs if r.variant == v} for v in (variant, reference)}
    for v, losses in by.items():
        if len(losses) < 2:
            raise ValueError(f"paired_gap needs at least two seeds of {v!r}, got {sorted(losses)}")
    if set(by[variant]) != set(by[reference]):
        raise ValueError(f"paired_gap needs the same seeds for {variant!r} and {reference!r}, "
                         f"got {sorted(by[variant])} and {sorted(by[reference])}")
    diffs = np.array([by[variant][s] - by[reference][s] for s in sorted(by[reference])])
    gap, spread = float(diffs.mean()), float(diffs.max() - diffs.min())
    seed_spread = min(max(v.values()) - min(v.values()) for v in by.values())
    n = len(diffs)
    verdict = ("indistinguishable at this scale" if abs(gap) <= spread else
               "consistent in sign, smaller than the seed spread" if abs(gap) < seed_spread else
               f"larger than the seed spread, one sign in all {n} seeds (sign-test p = {2.0 ** (1 - n):.2g})")
    return {"gap": gap, "gap_pct": 100 * gap / float(np.mean(list(by[reference].values()))), "spread": spread,
            "seed_spread": float(seed_spread), "verdict": verdict}


def ccc_table(summary: dict[str, dict[str, float]]) -> Table:
    """The CCC experiment's table from :func:`ccc_summary`: one row per variant, named as in the book
    (``VARIANT_NAMES``), with its held-out loss (mean over the seeds, the header says how many) and its spread, three
    decimals; training seconds and inference milliseconds, two decimals; the largest stream mean to two significant
    digits. The lab built it in its cell, 12 lines of formats (screenshot read 51, item 8)."""
    from lnbook.folding.ccc_training import VARIANT_NAMES
    from lnbook.util.tables import significant

    if not summary:
        raise ValueError("the summary is empty: pass ccc_summary(runs, times)")
    seeds = {s["seeds"] for s in summary.values()}
    if len(seeds) != 1:
        raise ValueError(f"every variant must have run on the same number of seeds, got {seeds}")
    loss = f"held-out loss, mean of {seeds.pop()} seeds"
    return Table([[VARIANT_NAMES.get(v, v), s["loss"], s["spread"], s["train_s"], 1e3 * s["infer_s"],
                   significant(s["stream_mean"], 2)] for v, s in summary.items()],
                 ["variant", loss, "spread over seeds", "training (s)", "inference (ms)", "largest stream mean"],
                 {loss: ".3f", "spread over seeds": ".3f", "training (s)": ".2f", "inference (ms)": ".2f"})


def ccc_figure(runs: list[RunResult], summary: dict[str, dict[str, float]]):
    """Top left: training loss per step (10-step means), per variant the mean over seeds with a band from the
    lowest to the highest seed; top right: held-out loss per seed; bottom: each variant's training loss minus
    LayerNorm's in the same seed (mean and band over seeds), where curves that overlap above come apart. Variants
    are named as in the book's tables (``VARIANT_NAMES``), each with its own colour and line style. When the mean
    curves of the top left lie within 5% of that panel's loss range of each other (they coincide at the lab's scale:
    CCC + RMSNorm is LayerNorm with its biases at zero, chapter 7's ``prop-ch7-ccc-training``), the panel says so,
    with the largest gap between them, and points to the bottom panel. The book's column wide, its text readable
    there (:func:`lnbook.util.plotting.readability_problems`)."""
    from lnbook.folding.ccc_training import VARIANT_NAMES
    from lnbook.util.plotting import COLUMN_WIDTH_IN, PALETTE

    variants = list(summary)
    fig = plt.figure(figsize=(COLUMN_WIDTH_IN, 6.2))
    grid = fig.add_gridspec(2, 2)
    a, b, c = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, :])
    styles = {v: (PALETTE[i % len(PALETTE)], ("-", "--", ":", "-.")[i % 4]) for i, v in enumerate(variants)}
    curves = {v: {r.seed: np.convolve(r.losses, np.ones(10) / 10, mode="valid") for r in runs if r.variant == v}
              for v in variants}
    reference = "ln" if "ln" in curves else None
    for i, v in enumerate(variants):
        colour, ls = styles[v]
        stack = np.array(list(curves[v].values()))
        steps = np.arange(stack.shape[1])
        a.plot(steps, stack.mean(0), color=colour, ls=ls, lw=1.5, label=VARIANT_NAMES.get(v, v))
        a.fill_between(steps, stack.min(0), stack.max(0), color=colour, alpha=0.15, lw=0)
        held = [r.held_out_loss for r in runs if r.variant == v]
        b.plot([i] * len(held), held, "o", color=colour)
        seeds = sorted(set(curves[v]) & set(curves[reference])) if reference is not None and v != reference else []
        if seeds:
            diff = np.array([curves[v][s] - curves[reference][s] for s in seeds])
            c.plot(steps, diff.mean(0), color=colour, ls=ls, lw=1.5)
            c.fill_between(steps, diff.min(0), diff.max(0), color=colour, alpha=0.15, lw=0)
    a.set(xlabel="step", ylabel="training loss\n(nats/char)")
    means = np.array([np.array(list(curves[v].values())).mean(0) for v in variants])
    gap = float((means.max(0) - means.min(0)).max()) if len(variants) > 1 else 0.0
    if len(variants) > 1 and gap <= 0.05 * float(means.max() - means.min()):  # a few pixels apart: one curve to the eye
        a.text(0.97, 0.95, f"the {len(variants)} means coincide here:\nat most {gap:.3f} apart\n(differences: bottom)",
               transform=a.transAxes, ha="right", va="top", fontsize=10)
    b.set_xticks(range(len(variants)), [VARIANT_NAMES.get(v, v).replace(" + ", " +\n") for v in variants])
    b.set(ylabel="held-out loss\n(nats/char)", xlim=(-0.5, len(variants) - 0.5))
    if reference is not None:
        c.axhline(0, color=styles[reference][0], ls=styles[reference][1], lw=1.5)
        c.set(xlabel="step", ylabel="loss minus LayerNorm's,\nsame seed (nats/char)")
    handles, labels = a.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels))  # below the panels, clear of the curves
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def degrees_from_ninety(d: int) -> float:
    """The angle from 90 degrees of a direction with |cos| equal to the random baseline in R^d."""
    return math.degrees(math.asin(random_mean_abs_cosine(d)))


# --- the folding lab -------------------------------------------------------------------------------------


def identity_demo(seed: int = 0) -> dict[str, float]:
    """The identity behind folding on a random 8 x 5 linear layer (float64): the largest |mean| of the centred
    layer's outputs, the spread of ``y - y_centred`` along each row, ``|LN(y) - RMS(y_centred)|`` and, as a
    control, ``|LN(y) - RMS(y)|``."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(seed)
    W, b = torch.randn(8, 5, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
    x = torch.randn(1000, 5, generator=g, dtype=torch.float64)
    y, yc = x @ W.T + b, x @ (W - W.mean(dim=0)).T + (b - b.mean())
    return {"centred mean": float(yc.mean(-1).abs().max()), "shift spread": float((y - yc).std(-1).max()),
            "LN(y) - RMS(centred)": float((F.layer_norm(y, (8,)) - F.rms_norm(yc, (8,), eps=1e-5)).abs().max()),
            "LN(y) - RMS(y)": float((F.layer_norm(y, (8,)) - F.rms_norm(y, (8,), eps=1e-5)).abs().max())}


def relative_difference(a, b, inputs, kwargs=None) -> float:
    """max |a - b| / max |a| over the outputs of two models."""
    from lnbook.folding.fold import max_output_difference

    diff, scale = max_output_difference(a, b, inputs, kwargs)
    return diff / scale


def book_transformer_fold(vocab_size: int, X, Y, *, d_model: int, n_layers: int, seq: int, device=None) -> dict:
    """Train the pre-LN TinyTransformer for one epoch, fold it, and measure the fold: a dict with the model
    (``gpt``), its float64 copy (``gpt64``) and the report of each (``report``, ``report64``: each model is traced
    once, and a caller reuses them), the folded copies (affine kept, folded), the test tokens and the relative output
    differences (float32, float64, and the negative control without centring)."""
    import warnings

    from lnbook.folding.fold import find_foldable_layernorms, fold_layernorms

    torch.manual_seed(0)
    gpt = TinyTransformer(vocab_size, d_model, 4, n_layers, max_len=seq, norm="ln")
    train(gpt, X, Y, epochs=1, task="next_token", batch_size=32, optimizer="adamw", lr=3e-3, label="pre-LN GPT", report=False,
          device=device)
    gpt = gpt.cpu().eval()
    example = X[:4]
    report = find_foldable_layernorms(gpt, example)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folded = fold_layernorms(gpt, example, report=report)
        folded_affine = fold_layernorms(gpt, example, report=report, affine="fold")
        gpt64 = TinyTransformer(vocab_size, d_model, 4, n_layers, max_len=seq, norm="ln").double()
        gpt64.load_state_dict(gpt.state_dict())
        report64 = find_foldable_layernorms(gpt64, example)
        folded64 = fold_layernorms(gpt64, example, report=report64)
        uncentred, _ = without_shape_guards(folded)  # a copy: ``folded`` itself is left as it is
    # the negative control: the original's un-centred writers under the RMSNorms. load_state_dict refuses them
    # (fold.RefuseUncentredWeights), and a folded model refuses calls after its weights changed in place
    # (call_proofs.RefuseChangesSinceFolding), so they are written into a copy without its guards, on purpose
    state = {**dict(uncentred.named_parameters()), **dict(uncentred.named_buffers())}
    with torch.no_grad():
        for k, v in gpt.state_dict().items():
            if "norm" not in k and k in state:
                state[k].copy_(v)
    tokens = torch.randint(0, vocab_size, (16, seq), generator=torch.Generator().manual_seed(1))
    return {"gpt": gpt, "gpt64": gpt64, "report": report, "report64": report64, "folded": folded, "folded_affine": folded_affine,
            "example": example, "tokens": tokens,
            "diff32": relative_difference(gpt, folded, tokens), "diff32_affine": relative_difference(gpt, folded_affine, tokens),
            "diff64": relative_difference(gpt64, folded64, tokens), "uncentred": relative_difference(gpt, uncentred, tokens)}


def stream_share_figure(gpt64, example, tokens, report=None):
    """Box plots of cos^2 of the residual-stream vectors per depth, before and after centring the writers. The
    book's column wide, its text readable there (:func:`lnbook.util.plotting.readability_problems`). ``report``:
    the fold report of ``gpt64`` when the caller has it (``find_foldable_layernorms(gpt64, example)``, traced
    again when ``None``); a report of another model is refused."""
    from lnbook.util.plotting import COLUMN_WIDTH_IN
    from lnbook.folding.fold import centre_writers, find_foldable_layernorms

    if report is None:
        report = find_foldable_layernorms(gpt64, example)
    elif getattr(report, "_model_id", None) != id(gpt64):
        raise ValueError("report= must be find_foldable_layernorms(gpt64, ...) of this gpt64 (or None to trace it here)")
    centred = centre_writers(gpt64, report)
    with torch.no_grad():
        before, after = gpt64.hidden_states(tokens), centred.hidden_states(tokens)
    share = lambda h: (cosine_to_uniform(h) ** 2).flatten().cpu().numpy()  # noqa: E731
    fig, ax = plt.subplots(figsize=(COLUMN_WIDTH_IN, 3.4))
    pos = np.arange(len(before))
    # every part of each box in its legend colour: with the style's defaults the original's boxes and medians were
    # drawn in colours the legend did not show (screenshot read, issue 33)
    black = dict(color="k")
    ax.boxplot([share(h) for h in before], positions=pos - 0.18, widths=0.3, showfliers=False,
               boxprops=black, medianprops=black, whiskerprops=black, capprops=black)
    red = dict(color="C3")
    ax.boxplot([np.maximum(share(h), 1e-35) for h in after], positions=pos + 0.18, widths=0.3, showfliers=False,
               boxprops=red, medianprops=red, whiskerprops=red, capprops=red)
    ax.set_yscale("log")
    ax.set_xticks(pos, ["embed"] + [f"block {i + 1}" for i in range(len(before) - 1)])
    ax.set_ylabel(r"$\cos^2\theta$ of stream vectors")
    ax.plot([], [], color="k", label="original")
    ax.plot([], [], color="C3", label="writers centred")
    ax.legend(loc="center right")
    ax.set_title("Residual stream of the pre-LN Transformer (float64)")
    return fig, max(float(share(h).max()) for h in after)


def randomised_norms(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Gains and biases of every LayerNorm drawn at random (trained models have them away from 1 and 0)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm) and m.weight is not None:
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=gen))
                m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=gen))
    return model.eval()


def architecture_cases(vocab_size: int, d_model: int, seq: int, gpt, example, tokens) -> dict:
    """The lab's small architectures: ``{name: (model, example, test input)}``."""
    from torch import nn

    from lnbook.ml.models import mlp

    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, norm_first=True, batch_first=True), 2,
                                    norm=nn.LayerNorm(32), enable_nested_tensor=False)
    post = TinyTransformer(vocab_size, d_model, 4, 2, max_len=seq, norm_first=False)
    return {
        "pre-LN GPT (trained)": (gpt, example, tokens),
        "post-LN GPT": (randomised_norms(post), example, tokens),
        "TransformerEncoderLayer alone": (randomised_norms(nn.TransformerEncoderLayer(32, 4, 64, norm_first=True, batch_first=True)),
                                             torch.randn(2, 10, 32), torch.randn(8, 10, 32)),
        "Linear → TransformerEncoder → Linear": (randomised_norms(nn.Sequential(nn.Linear(8, 32), encoder, nn.Linear(32, 3))),
                                                      torch.randn(2, 10, 8), torch.randn(8, 10, 8)),
        "LN-Net (Linear → LN)": (randomised_norms(mlp(5, 16, 3, 2, norm="ln", affine=True)), torch.randn(4, 5), torch.randn(64, 5)),
        "MLP Linear → LN → ReLU": (randomised_norms(mlp(5, 16, 3, 2, norm="ln", activation="relu", affine=True)),
                                     torch.randn(4, 5), torch.randn(64, 5)),
        "MLP Linear → ReLU → LN": (randomised_norms(nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.LayerNorm(16), nn.Linear(16, 2))),
                                     torch.randn(4, 5), torch.randn(64, 5)),
    }


def architecture_rows(cases: dict, reports: dict | None = None) -> list[tuple[str, int, int, float | None, list[str]]]:
    """``(name, LayerNorms, foldable, relative difference of the fold or None, every refusal's reason)`` per case;
    :func:`lnbook.folding.refusals.summarise_refusals` turns the reasons into a table cell. ``reports`` maps a case's
    name to the report of its model and example that the caller has already (``find_foldable_layernorms``), so that
    it is not traced again; a report of another model is refused."""
    import warnings

    from lnbook.folding.fold import find_foldable_layernorms, fold_layernorms

    reports = dict(reports or {})
    unknown = sorted(set(reports) - set(cases))
    if unknown:
        raise ValueError(f"reports names cases that are not there: {unknown}; the cases are {list(cases)}")
    rows = []
    for name, (model, ex, test) in cases.items():
        rep = reports.get(name)
        if rep is None:
            rep = find_foldable_layernorms(model, ex)
        elif getattr(rep, "_model_id", None) != id(model):
            raise ValueError(f"reports[{name!r}] is not a report of that case's model: pass find_foldable_layernorms(model, example)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            diff = relative_difference(model, fold_layernorms(model, ex, report=rep), test) if rep.foldable else None
        rows.append((name, len(rep.layer_norms), len(rep.foldable), diff, [v.reason for v in rep.refused]))
    return rows


def vit_on_digits(epochs: int, device=None) -> dict:
    """TinyViT trained on scikit-learn's digits, folded with ``affine="fold"``: test accuracy, predictions
    changed by the fold, relative output difference, and the report."""
    from lnbook.folding.fold import find_foldable_layernorms, fold_layernorms
    from lnbook.ml.data import digits
    from lnbook.ml.vit import TinyViT

    Xd, yd = digits()
    images = Xd.reshape(-1, 1, 8, 8)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    tr, te = order[:1500], order[1500:]
    torch.manual_seed(0)
    vit = TinyViT(image_size=8, patch_size=2, n_classes=10, d_model=32, n_heads=4, n_layers=2)
    train(vit, images[tr], yd[tr], epochs=epochs, optimizer="adamw", lr=3e-3, batch_size=64, stop_at_fit=False,
          log_every=epochs, label="TinyViT on digits", report=False, device=device)
    vit = vit.cpu().eval()
    # the images' one channel is the only size 1, and the patch convolution needs it: traced as given (the default
    # first tries every size 1 at 2, a trace that fails here, and then traces it as given; the same report)
    report = find_foldable_layernorms(vit, images[:4], enlarge=False)
    folded = fold_layernorms(vit, images[:4], report=report, affine="fold")
    with torch.no_grad():
        pred, pred_folded = vit(images[te]).argmax(-1), folded(images[te]).argmax(-1)
    return {"report": report, "accuracy": float((pred == yd[te]).float().mean()), "changed": int((pred != pred_folded).sum()),
            "n_test": len(te), "difference": relative_difference(vit, folded, images[te])}


def minilm_fold(sentences=("LayerNorm removes the mean and divides by the standard deviation.", "RMSNorm skips the mean.")) -> dict:
    """MiniLM folded in float32 and float64: the report and the largest output differences, beside the float32
    rounding error of the original itself (against float64)."""
    from lnbook.folding.fold import find_foldable_layernorms, fold_layernorms, max_output_difference
    from lnbook.folding.pretrained import load_minilm

    minilm, tokenizer = load_minilm()
    enc = dict(tokenizer(list(sentences), return_tensors="pt", padding=True))
    report = find_foldable_layernorms(minilm, (), enc)
    # measured here only, never called at other shapes: no copy of the original kept for proving other calls
    folded = fold_layernorms(minilm, (), enc, report=report, prove_calls=False)
    mini64 = load_minilm(torch.float64)[0]
    folded64 = fold_layernorms(mini64, (), enc, prove_calls=False)
    with torch.no_grad():
        own = float((minilm(**enc).last_hidden_state.double() - mini64(**enc).last_hidden_state).abs().max())
    return {"report": report, "fold32": max_output_difference(minilm, folded, (), enc)[0],
            "fold64": max_output_difference(mini64, folded64, (), enc)[0], "own32": own}


# --- speed (the committed run of benchmarks/fold_speed.py) ------------------------------------------------


# the speed figure's series: (colour, marker, line style) per (form of RMSNorm, eager or compiled); no two share a
# colour or a marker (issue 33: eager and compiled differed only by the dash, unreadable at the column)
SPEED_STYLES = {("fold", False): ("C0", "o", "-"), ("fold", True): ("C4", "D", "--"),
                ("keep", False): ("C1", "s", "-"), ("keep", True): ("C3", "v", "--")}
SPEED_FONT_PT = 10.0  # every text of the speed figure, at the column (the book's body text is larger still)


def speed_figure(bench: dict, replicate: dict | None = None):
    """Left: the norm alone, speed-up per width (eager, compiled, best of each norm), A/A band; right: end to end,
    with the run's end-to-end A/A band and, when ``replicate`` (another recorded run) is given, its values at the
    sizes it measured as black crosses.
    The book's column wide, every text at least :data:`SPEED_FONT_PT` there
    (:func:`lnbook.util.plotting.readability_problems`), the legends below the panels; each series its own colour
    and marker (:data:`SPEED_STYLES`), eager and compiled included."""
    from lnbook.util.plotting import COLUMN_WIDTH_IN

    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_WIDTH_IN, 6.0))
    names = {"fold": "RMSNorm", "keep": "RMSNorm + bias"}
    for compiled in (False, True):
        rows = [r for r in bench["kernels"] if r["compiled"] == compiled]
        mode = "compiled" if compiled else "eager"
        for form in ("fold", "keep"):
            colour, marker, ls = SPEED_STYLES[(form, compiled)]
            axes[0].plot([r["d"] for r in rows], [100 * r[f"speedup_{form}"] for r in rows], marker=marker, ls=ls,
                         color=colour, ms=6, label=f"{names[form]} ({mode})")
        noise = max(abs(r["speedup_aa"]) for r in rows)
        axes[0].axhspan(-100 * noise, 100 * noise, color="0.88", zorder=0)
        rows_e = [r for r in bench["end_to_end"] if r["compiled"] == compiled]
        xs = np.arange(len(rows_e)) + (0.2 if compiled else -0.2)
        for form, shift in (("fold", -0.1), ("keep", 0.1)):
            colour = SPEED_STYLES[(form, compiled)][0]
            axes[1].bar(xs + shift, [100 * r[f"speedup_{form}"] for r in rows_e], 0.2, color=colour,
                        hatch="//" if compiled else None, edgecolor="white", label=f"{form} ({mode})")
    best = bench.get("best_kernels", [])
    if best:
        axes[0].plot([r["d"] for r in best], [100 * r["speedup_fold"] for r in best], "k^:", ms=7, label="best RMSNorm vs best LN")
    axes[0].axhspan(50, 80, color="C2", alpha=0.15, label="reviewers: 50–80%")
    axes[0].axhline(0, color="k", lw=0.8)
    axes[0].set_xscale("log", base=2)
    axes[0].set(xlabel="width $d$ (1024 tokens)", ylabel="speed-up of the norm alone (%)")
    below = dict(fontsize=SPEED_FONT_PT, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    axes[0].legend(**below)
    e2e_noise = max(abs(r["speedup_aa"]) for r in bench["end_to_end"])
    axes[1].axhspan(-100 * e2e_noise, 100 * e2e_noise, color="0.88", zorder=0, label="A/A noise band")
    if replicate is not None:
        where = {(r["size"], r["compiled"]): i for i, r in enumerate(r for r in bench["end_to_end"] if not r["compiled"])}
        marked = False
        for r in replicate.get("end_to_end", []):
            if (r["size"], False) not in where:
                continue
            x = where[(r["size"], False)] + (0.2 if r["compiled"] else -0.2)
            for form, shift in (("fold", -0.1), ("keep", 0.1)):
                axes[1].plot([x + shift], [100 * r[f"speedup_{form}"]], "kx", ms=7, mew=1.8,
                             label=None if marked else "replicate run")
                marked = True
    axes[1].axhspan(2, 12, color="C2", alpha=0.15, label="paper: 2–12%")
    axes[1].axhline(0, color="k", lw=0.8)
    axes[1].set_xticks(range(len(rows_e)), [f"{r['size']}\n$d = {r['d_model']}$\n$L = {r['n_layers']}$" for r in rows_e])
    axes[1].set_ylabel("end-to-end speed-up (%)")
    axes[1].legend(**below)
    for ax in axes:
        ax.tick_params(labelsize=SPEED_FONT_PT)
        ax.xaxis.label.set_size(SPEED_FONT_PT)
        ax.yaxis.label.set_size(SPEED_FONT_PT)
    fig.tight_layout()
    return fig


def best_kernel_rows(bench: dict) -> list[dict]:
    """Per width, each norm's faster kernel (eager or compiled) and the speed-ups best against best: the run's
    ``best_kernels`` rows, or computed from its eager and compiled kernel rows."""
    from lnbook.folding.speed import best_kernels
    from lnbook.util.timing import speedup

    if bench.get("best_kernels"):
        return bench["best_kernels"]
    eager = {r["d"]: r for r in bench["kernels"] if not r["compiled"]}
    comp = {r["d"]: r for r in bench["kernels"] if r["compiled"]}
    names = ("layer_norm", "rms_norm+bias", "rms_norm")
    rows = []
    for d in sorted(set(eager) & set(comp)):
        best = best_kernels({n: eager[d][f"{n}_us"] for n in names}, {n: comp[d][f"{n}_us"] for n in names})
        rows.append({"d": d, **{f"{n}_us": best[n][0] for n in names}, **{f"{n}_from": best[n][1] for n in names},
                     "speedup_keep": speedup(best["layer_norm"][0], best["rms_norm+bias"][0]),
                     "speedup_fold": speedup(best["layer_norm"][0], best["rms_norm"][0])})
    return rows


def _extremes(prefix: str, rows: list[dict]) -> dict[str, float]:
    """The smallest and largest speed-up of RMSNorm without affine over the kernel rows (one per width), and the
    widths where they occur: ``{prefix}-min``, ``{prefix}-max``, ``{prefix}-min-d``, ``{prefix}-max-d``."""
    if not rows:
        raise ValueError(f"{prefix}: the run has no kernel rows to take the extremes of")
    low, high = min(rows, key=lambda r: r["speedup_fold"]), max(rows, key=lambda r: r["speedup_fold"])
    return {f"{prefix}-min": low["speedup_fold"], f"{prefix}-max": high["speedup_fold"],
            f"{prefix}-min-d": low["d"], f"{prefix}-max-d": high["d"]}


def speed_numbers(bench: dict, focus: dict | None = None) -> dict[str, float]:
    """Medians and extremes that the chapter quotes (fractions, not %; the widths of the kernel extremes as
    ``*-min-d`` and ``*-max-d``) from the full run ``bench``: kernels, end to
    end, best kernel against best kernel, the norms' share of each model by ablation (the largest over the sizes)
    and the allocator effect, the last two where the run has them (runs made before the benchmark measured them
    have not). From ``focus``, a smaller run (None: left out): its best kernels and end-to-end rows as
    ``focus-*``, and the ablation share and allocator effect where the full run lacks them; at each width of
    both runs, both best-against-best speed-ups and the larger A/A control (``best-{d}``, ``focus-best-{d}``,
    ``kernel-aa-{d}``); its compiled kernels at each width (``focus-compiled-{d}``, the widths as
    ``focus-compiled-widths``), their A/A control (``focus-compiled-aa``) and how many lie inside and above the
    reviewers' 50-80% (``focus-compiled-in-range``, ``focus-compiled-above``); over the kernel comparisons both runs made, the largest change of the speed-up between
    them (``between-runs``) and where it is (``between-runs-d``, ``-compiled``, ``-full``, ``-focus``)."""
    kern = {c: [r for r in bench["kernels"] if r["compiled"] == c] for c in (False, True)}
    e2e = {c: [r for r in bench["end_to_end"] if r["compiled"] == c] for c in (False, True)}
    out = {}
    for c, mode in [(False, "eager"), (True, "compiled")]:
        fold = [r["speedup_fold"] for r in kern[c]]
        out |= _extremes(f"kernel-{mode}", kern[c])
        out |= {f"kernel-{mode}": float(np.median(fold)),
                f"kernel-{mode}-in-range": sum(0.5 <= f <= 0.8 for f in fold), f"kernel-{mode}-above": sum(f > 0.8 for f in fold),
                f"kernel-keep-{mode}": float(np.median([r["speedup_keep"] for r in kern[c]])),
                f"kernel-aa-{mode}": max(abs(r["speedup_aa"]) for r in kern[c]),
                f"e2e-{mode}": float(np.median([r["speedup_fold"] for r in e2e[c]])),
                f"e2e-keep-{mode}": float(np.median([r["speedup_keep"] for r in e2e[c]])),
                f"e2e-aa-{mode}": max(abs(r["speedup_aa"]) for r in e2e[c])}
        for k in ("keep", "fold"):
            out[f"e2e-{k}-{mode}-min"] = min(r[f"speedup_{k}"] for r in e2e[c])
            out[f"e2e-{k}-{mode}-max"] = max(r[f"speedup_{k}"] for r in e2e[c])
        if e2e[c] and all("ln_share_ablation" in r for r in e2e[c]):
            out[f"share-ablation-{mode}"] = max(r["ln_share_ablation"] for r in e2e[c])
    # the sizes at which each folded model's end-to-end difference exceeds the run's A/A noise (the larger of the two
    # passes', the noise the chapter names): a difference inside it is not a measured difference (referee 42)
    noise = max(out["e2e-aa-eager"], out["e2e-aa-compiled"])
    out["e2e-sizes"] = len(e2e[False])
    for c, mode in [(False, "eager"), (True, "compiled")]:
        for k in ("keep", "fold"):
            out[f"e2e-{k}-{mode}-beyond"] = sum(abs(r[f"speedup_{k}"]) > noise for r in e2e[c])
    # norm_share profiles the eager model in both passes of the run: the eager pass, and again in the compiled pass
    out["share-profiler-eager"] = max(r["ln_share"] for r in e2e[False])
    out["share-profiler-again"] = max(r["ln_share"] for r in e2e[True]) if e2e[True] else out["share-profiler-eager"]
    # the same eager model profiled in both passes: the largest ratio between its two shares over the sizes
    again = {r["size"]: r["ln_share"] for r in e2e[True]}
    out["share-profiler-spread"] = max((max(r["ln_share"], again[r["size"]]) / min(r["ln_share"], again[r["size"]])
                                        for r in e2e[False] if r["size"] in again), default=1.0)
    guards = [(r["guard_ms"], r["original_ms"]) for r in bench["end_to_end"] if "guard_ms" in r]
    if guards:  # the folded models were timed without fold_layernorms' shape guard; the guard alone
        out["guard-ms-max"] = max(g for g, _ in guards)
        out["guard-share-max"] = max(g / t for g, t in guards)
    best = best_kernel_rows(bench)
    out["kernel-best"] = float(np.median([r["speedup_fold"] for r in best]))
    out["kernel-best-keep"] = float(np.median([r["speedup_keep"] for r in best]))
    out |= _extremes("kernel-best", best)
    out["best-ln-compiled"] = sum(r["layer_norm_from"] == "compiled" for r in best)
    out["best-widths"] = len(best)
    # the allocator hypothesis: raising the mmap threshold should make RMSNorm relatively faster; count the
    # comparisons (run, width, form of RMSNorm) where it made it relatively slower instead
    alloc_rows = [r for run in (bench, focus or {}) for r in run.get("allocator", [])]
    out["alloc-comparisons"] = 2 * len(alloc_rows)
    out["alloc-heap-slower"] = sum(r[f"speedup_{k}_heap"] < r[f"speedup_{k}_default"] for r in alloc_rows for k in ("keep", "fold"))
    if alloc_rows:
        out["alloc-aa-max"] = max(abs(r[m]["speedup_aa"]) for r in alloc_rows for m in ("default", "heap"))
    for label, run in (("full", bench), ("focus", focus or {})):  # each run's own count, and how much slower its
        # heap-setting process ran LayerNorm itself than its default process (a disturbed process shows there)
        rows = run.get("allocator", [])
        if rows:
            out[f"alloc-comparisons-{label}"] = 2 * len(rows)
            out[f"alloc-heap-slower-{label}"] = sum(r[f"speedup_{k}_heap"] < r[f"speedup_{k}_default"]
                                                   for r in rows for k in ("keep", "fold"))
            ratios = [r["heap"]["layer_norm_us"] / r["default"]["layer_norm_us"] for r in rows]
            out[f"alloc-ln-heap-over-default-{label}-min"] = min(ratios)
            out[f"alloc-ln-heap-over-default-{label}-max"] = max(ratios)
    allocator = bench.get("allocator") or (focus or {}).get("allocator", [])
    for r in allocator:
        out[f"alloc-keep-default-{r['d']}"] = r["speedup_keep_default"]
        out[f"alloc-keep-heap-{r['d']}"] = r["speedup_keep_heap"]
        out[f"alloc-fold-default-{r['d']}"] = r["speedup_fold_default"]
        out[f"alloc-fold-heap-{r['d']}"] = r["speedup_fold_heap"]
    if focus:
        focus_best = best_kernel_rows(focus)
        out["focus-best-ln-eager"] = sum(r["layer_norm_from"] == "eager" for r in focus_best)
        out["focus-widths"] = len(focus_best)
        out["focus-kernel-best"] = float(np.median([r["speedup_fold"] for r in focus_best]))
        out["focus-kernel-aa"] = max(abs(r["speedup_aa"]) for r in focus["kernels"])
        # the replicate's compiled kernels (compiled RMSNorm against compiled LayerNorm): each width's speed-up, the
        # run's A/A control over them, and how many fall inside the reviewers' 50-80% (``focus-compiled-*``)
        compiled = sorted((r for r in focus["kernels"] if r["compiled"]), key=lambda r: r["d"])
        out["focus-compiled-widths"] = [r["d"] for r in compiled]
        out |= {f"focus-compiled-{r['d']}": r["speedup_fold"] for r in compiled}
        if compiled:
            out["focus-compiled-aa"] = max(abs(r["speedup_aa"]) for r in compiled)
        out["focus-compiled-in-range"] = sum(0.5 <= r["speedup_fold"] <= 0.8 for r in compiled)
        out["focus-compiled-above"] = sum(r["speedup_fold"] > 0.8 for r in compiled)
        # the widths of both runs: each run's best-against-best speed-up there, and the largest A/A control of
        # either run at that width (eager or compiled), as ``best-{d}``, ``focus-best-{d}``, ``kernel-aa-{d}``
        full_best = {r["d"]: r["speedup_fold"] for r in best}
        for r in focus_best:
            d = r["d"]
            if d in full_best:
                out[f"best-{d}"], out[f"focus-best-{d}"] = full_best[d], r["speedup_fold"]
                out[f"kernel-aa-{d}"] = max(abs(k["speedup_aa"]) for run in (bench, focus) for k in run["kernels"] if k["d"] == d)
        # the same kernel comparison (width, eager or compiled) in both runs: the largest change of RMSNorm's
        # speed-up between them, a noise that the A/A control inside one run does not see
        pairs = [(k, f) for k in bench["kernels"] for f in focus["kernels"] if (k["d"], k["compiled"]) == (f["d"], f["compiled"])]
        if pairs:
            k, f = max(pairs, key=lambda p: abs(p[0]["speedup_fold"] - p[1]["speedup_fold"]))
            out |= {"between-runs": abs(k["speedup_fold"] - f["speedup_fold"]), "between-runs-d": k["d"],
                    "between-runs-compiled": k["compiled"], "between-runs-full": k["speedup_fold"],
                    "between-runs-focus": f["speedup_fold"]}
        for r in focus["end_to_end"]:
            mode = "compiled" if r["compiled"] else "eager"
            out.setdefault(f"share-ablation-{mode}", r["ln_share_ablation"])
            out[f"share-profiler-focus-{mode}"] = r["ln_share"]
            for k in ("aa", "keep", "fold"):
                out[f"focus-e2e-{mode}-{k}"] = r[f"speedup_{k}"]
    return out


#: the rows of the lab's table of how exact the fold is: what each measurement of :func:`book_transformer_fold` compares
#: with the original model, keyed by the entry of its result
FOLD_DIFFERENCES = {
    "diff32": "folded, gain and bias kept (float32)",
    "diff32_affine": "folded, gain and bias moved into the next layers (float32)",
    "diff64": "folded (float64)",
    "uncentred": "RMSNorm swapped in without centring (float32)",
}


def fold_differences_table(run: dict) -> Table:
    """How exact the fold of :func:`book_transformer_fold` is: one row per :data:`FOLD_DIFFERENCES`, its largest
    output difference from the original relative to the largest output, to two significant digits in the book's one
    style (:func:`~lnbook.util.tables.significant`: ``3.1×10⁻⁷``, ``0.42``)."""
    from lnbook.util.tables import significant

    return Table([[name, significant(run[key], 2)] for key, name in FOLD_DIFFERENCES.items()],
                 ["model", "largest difference ÷ largest output"])


def writers_table(report) -> Table:
    """The writers a fold centres (``report.writers_to_centre()``), one row per kind: how many, and their modules in
    ranges (:func:`lnbook.folding.refusals.module_ranges`: ``attn.out in blocks 0–1``), one range per line."""
    from lnbook.folding.refusals import module_ranges
    from lnbook.util.tables import Lines

    writers: dict[str, list[str]] = {}
    for w in report.writers_to_centre():
        writers.setdefault(w.kind, []).append(w.label)
    return Table([[kind, len(labels), Lines(module_ranges(labels))] for kind, labels in writers.items()],
                 ["writers centred", "how many", "modules"])
