r"""Phase transitions in a loss curve: sudden drops that follow a plateau.

Small LayerNorm MLPs often train in steps: the loss sits on a plateau, then falls by a large factor
(chapter 6); how fast it falls is not measured here (a detected step spans at least ``window`` epochs by
construction). :func:`phase_transitions` finds those
steps in a recorded curve, with a rule stated in its arguments, so that a figure can mark them and
a test can check the rule on curves whose steps are known.

The rule works on the **persistent envelope** of :math:`\log_{10}` of the loss: with ``persist`` = :math:`k`
samples, :math:`e_i = \min_{j \le i,\ j + k \le n}\ \max(\log_{10}\ell_j, \dots, \log_{10}\ell_{j+k-1})`, the
lowest level that the loss **stays at or below for** :math:`k` **consecutive samples** in a window that
starts by sample :math:`i`. It reads up to :math:`k - 1` samples ahead of :math:`i`, so a low that lasts is dated
from its first sample; the last :math:`k - 1` samples cannot start a window of their own and carry the last
value, so a drop within them is never detected (the rule is blind in the final window). Upward spikes of a noisy optimiser do not
create or hide a step, a single downward outlier does not make a new low (with :math:`k = 1` this is the
running minimum, which it does), and the envelope never rises. On a curve that falls monotonically the
envelope is :math:`\log_{10}` of the curve itself, so a clean step is placed where it is. With the logged
epochs :math:`t_i` (uniformly spaced; a shorter final step, the off-grid last log of
:func:`lnbook.ml.training.train`, is accepted and that last sample is left out, see :func:`phase_transitions`):

* a sample :math:`i` is **steep** if the envelope falls by at least ``min_drop`` decades over the
  next ``window`` epochs: :math:`e_i - e_{i+w} \ge` ``min_drop``;
* a maximal run of steep samples is one candidate step; it **follows a plateau** if, over the
  ``plateau`` epochs before the run starts, the envelope fell by at most ``plateau_drop`` decades
  (a run that starts before ``plateau`` epochs have passed has no plateau and is not a transition:
  the first fall from the initial loss is not a phase transition);
* the transition is placed at the **steepest** one-sample fall of the envelope inside the run (the
  run extended by the window), and its size is the envelope's total fall from the start of the run
  to the end of the extended run;
* steep runs whose extended runs overlap (the next run starts at or before the end of the previous one
  extended by the window) are **one** candidate step, so that one drop with a short pause inside it is not
  counted twice; the plateau test reads the start of the first run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lnbook.util.validation import check_positive_int

__all__ = ["Transition", "loss_envelope", "phase_transitions", "values_at_starts"]


@dataclass(frozen=True)
class Transition:
    """One phase transition: where it is steepest and how far the loss falls (in decades)."""

    epoch: int
    start_epoch: int
    end_epoch: int
    drop_decades: float

    @property
    def factor(self) -> float:
        """The factor by which the loss falls over the transition (``10 ** drop_decades``)."""
        return 10.0**self.drop_decades


def _as_curve(epochs, loss) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(epochs, dtype=float)
    y = np.asarray(loss, dtype=float)
    if t.ndim != 1 or y.ndim != 1 or len(t) != len(y):
        raise ValueError(f"epochs and loss must be 1-D sequences of equal length, got shapes {t.shape} and {y.shape}")
    if len(t) < 3:
        raise ValueError(f"a loss curve needs at least 3 points to show a transition, got {len(t)}")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(y))):
        raise ValueError("epochs and loss must be finite (a NaN loss is a diverged run; see TrainingDiverged)")
    if np.any(y <= 0):
        raise ValueError("the loss must be > 0 everywhere (the rule works on its logarithm)")
    steps = np.diff(t)
    if np.any(steps <= 0):
        raise ValueError("epochs must be increasing and uniformly spaced (log with a fixed log_every)")
    if len(steps) >= 2 and steps[-1] < steps[0] and np.allclose(steps[:-1], steps[0]):
        # train() logs the last epoch also when it is off the grid: that sample is left out
        t, y, steps = t[:-1], y[:-1], steps[:-1]
    if not np.allclose(steps, steps[0]):
        raise ValueError("epochs must be increasing and uniformly spaced (log with a fixed log_every; "
                         "only a shorter final step, train()'s off-grid last log, is accepted)")
    return t, y


def loss_envelope(loss, persist: int = 1) -> np.ndarray:
    r"""The persistent envelope of :math:`\log_{10}` of the loss (the curve the rule reads): at sample
    :math:`i`, the lowest level the loss stays at or below for ``persist`` consecutive samples in a
    window starting by :math:`i` (so it reads ``persist - 1`` samples ahead; the last ``persist - 1`` samples
    repeat the value of the last window). ``persist=1`` is the running minimum."""
    y = np.asarray(loss, dtype=float)
    if y.ndim != 1 or np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("loss must be a 1-D sequence of finite numbers > 0")
    persist = check_positive_int(persist, "persist")
    if persist > len(y):
        raise ValueError(f"persist={persist} samples is longer than the curve ({len(y)} samples)")
    logy = np.log10(y)
    level = np.lib.stride_tricks.sliding_window_view(logy, persist).max(axis=1)  # window starting at j
    env = np.minimum.accumulate(level)
    return np.concatenate([env, np.full(persist - 1, env[-1])])


def _samples(epochs: int, dt: float, name: str) -> int:
    """``epochs`` as a number of logged samples ``epochs / dt``; a length that is not a whole number of logging
    intervals is refused (rounding it would run the rule with another length than the caller gave)."""
    n = epochs / dt
    if round(n) < 1 or abs(n - round(n)) > 1e-9 * n:
        raise ValueError(f"{name}={epochs} epochs is not a whole number of logging intervals (the curve is logged "
                         f"every {dt:g} epochs): pass a multiple of {dt:g}, or log the curve more often")
    return int(round(n))


def phase_transitions(
    epochs,
    loss,
    *,
    window: int,
    min_drop: float = 0.3,
    plateau: int | None = None,
    plateau_drop: float | None = None,
    persist: int | None = None,
) -> list[Transition]:
    """The phase transitions of a loss curve, by the rule of the module docstring.

    ``epochs`` and ``loss`` are the recorded curve (``History.epochs`` and ``History.loss``);
    ``window``, ``plateau`` and ``persist`` are in epochs, whole multiples of the logging interval (else
    ``ValueError``: the rule would run with a rounded length);
    ``min_drop`` and ``plateau_drop`` are in decades of loss. Defaults: ``plateau = window``
    and ``plateau_drop = min_drop / 2``; ``persist`` (in epochs, default ``window``) is how long a new low
    must last to count (at least one logged sample). If the last logged epoch is off the grid (a
    shorter final step, as :func:`lnbook.ml.training.train` logs it), that sample is left out.
    """
    t, y = _as_curve(epochs, loss)
    window = check_positive_int(window, "window")
    plateau = window if plateau is None else check_positive_int(plateau, "plateau")
    if isinstance(min_drop, bool) or not isinstance(min_drop, (int, float)) or not (0 < min_drop < math.inf):
        raise ValueError(f"min_drop must be a finite number of decades > 0, got {min_drop!r}")
    plateau_drop = min_drop / 2 if plateau_drop is None else float(plateau_drop)
    if not (0 <= plateau_drop < min_drop):
        raise ValueError(f"plateau_drop must lie in [0, min_drop), got {plateau_drop!r}")
    dt = t[1] - t[0]
    persist = window if persist is None else check_positive_int(persist, "persist")
    w, p, k = (_samples(v, dt, name) for v, name in ((window, "window"), (plateau, "plateau"), (persist, "persist")))
    env = loss_envelope(y, min(k, len(y)))
    n = len(env)
    if n <= w:
        return []
    fall = env[: n - w] - env[w:]
    steep = np.append(fall >= min_drop, False)
    runs: list[list[int]] = []  # [start, end] of each maximal steep run, extended by the window
    i = 0
    while i < n - w:
        if not steep[i]:
            i += 1
            continue
        start = i
        while steep[i]:
            i += 1
        end = min(n - 1, i - 1 + w)  # the last sample of the extended run
        if runs and start <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], end)  # overlaps the previous extended run: the same drop
        else:
            runs.append([start, end])
    found: list[Transition] = []
    for start, end in runs:
        if start >= p and env[start - p] - env[start] <= plateau_drop:
            one_step = env[start:end] - env[start + 1 : end + 1]
            k = start + int(np.argmax(one_step))
            found.append(
                Transition(
                    epoch=int(round(t[k + 1])),
                    start_epoch=int(round(t[start])),
                    end_epoch=int(round(t[end])),
                    drop_decades=float(env[start] - env[end]),
                )
            )
    return found


def values_at_starts(epochs, values, transitions) -> np.ndarray:
    """The recorded ``values`` (a loss or accuracy curve logged at ``epochs``) at each transition's
    ``start_epoch``: the level of the plateau just before each drop. Raises if a start epoch was not logged."""
    t = [int(round(e)) for e in epochs]
    v = np.asarray(values, dtype=float)
    if len(t) != len(v):
        raise ValueError(f"epochs and values must have equal length, got {len(t)} and {len(v)}")
    where = {e: i for i, e in enumerate(t)}
    missing = [tr.start_epoch for tr in transitions if tr.start_epoch not in where]
    if missing:
        raise ValueError(f"start epochs {missing} are not logged epochs of this curve")
    return np.array([v[where[tr.start_epoch]] for tr in transitions], dtype=float)
