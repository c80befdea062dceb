"""Chapter 5's paper-scale random-label runs (grayscale CIFAR-10, MNIST): run or read them, and what they say.

At paper scale :func:`random_label_runs` trains the harness's sweep (:func:`lnbook.group_ln.lab.official_runs`,
:meth:`FitConfig.official`) on each data set whose folder is named, by ``LNBOOK_CIFAR10_DIR`` or ``LNBOOK_MNIST_DIR``
(either on its own, or both), and stores it in the ``recorded`` subfolder of the paper-scale results folder (``load_comparisons`` reads every
JSON file of the folder itself as comparisons); at any scale it reads what is stored there. The lab ``ch05_random_labels_lab``
shows :func:`describe_official`, the status line, a figure and one comparison per data set from
:class:`StoredFits`. The book never downloads data: without the files a data set is "not checkable here".
Tests: tests/group_ln/test_paper_runs.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lnbook.group_ln.lab import (
    OFFICIAL,
    FitConfig,
    Run,
    fit_random_labels,
    load_runs,
    official_runs,
    ordering_verdict,
    save_runs,
)
from lnbook.ml.data import cifar10_grayscale, mnist, random_labels
from lnbook.util.scale import SCALES

__all__ = ["CIFAR_FILE", "MNIST_FILE", "StoredFits", "describe_official", "random_label_runs", "groups_curve"]

CIFAR_FILE = "ch05-random-labels-cifar10.json"
MNIST_FILE = "ch05-random-labels-mnist.json"
_DATA = {CIFAR_FILE: "grayscale CIFAR-10", MNIST_FILE: "MNIST"}


def describe_official() -> str:
    """The harness's protocol (:data:`OFFICIAL`) in a few lines a reader can read (not a dict)."""
    o = OFFICIAL
    return "\n".join([
        f"data: {o['dataset']}",
        f"networks: width {o['width']}, depths {', '.join(map(str, o['depths']))}; "
        f"groups {', '.join(map(str, o['groups']))}",
        f"training: {o['optimizer']} (momentum {o['momentum']:g}, weight decay {o['weight_decay']:g}), "
        f"batch {o['batch_size']}, {o['epochs']} epochs, lr in {', '.join(f'{v:g}' for v in o['lrs'])} "
        f"multiplied by {o['lr_gamma']:g} every {o['lr_step']} epochs; eps {o['eps']:g}, seed {o['seed']}",
    ])


@dataclass
class StoredFits:
    """The best fits of one stored paper-scale run (``fits`` is ``None`` when none is stored)."""

    data: str
    fits: dict[str, float] | None = None
    meta: dict = field(default_factory=dict)

    @property
    def stored(self) -> bool:
        return self.fits is not None

    def verdict(self) -> tuple[float, str]:
        """``(best LN-G fit at depth 4, verdict)`` of :func:`lnbook.group_ln.lab.ordering_verdict`."""
        if self.fits is None:
            raise ValueError(f"no stored {self.data} run: run the lab at paper scale with the data first")
        return ordering_verdict(self.fits)

    def ours(self) -> str:
        """Our side of the comparison: ``linear 0.301, LN-Net 0.552, best LN-G 1.000``."""
        best, _ = self.verdict()
        return f"linear {self.fits['linear']:.3f}, LN-Net {self.fits['LN d4']:.3f}, best LN-G {best:.3f}"


def _read(folder: Path, name: str) -> StoredFits:
    path = folder / name
    if not path.exists():
        return StoredFits(_DATA[name])
    meta, histories = load_runs(path)
    return StoredFits(_DATA[name], {k: h.best_accuracy for k, h in histories.items()}, meta)


def random_label_runs(
    folder, scale: str, cifar_dir: Path | None = None, mnist_dir: Path | None = None, device=None
) -> tuple[str, StoredFits, StoredFits]:
    """``(status line, CIFAR-10 fits, MNIST fits)``: at ``scale="paper"`` the sweep is trained first on each data set
    whose folder is given (``cifar_dir``, ``mnist_dir``: either, both or neither) and stored in ``folder``; what
    ``folder`` holds is then read. The status line names what was trained and which variable to set for the rest."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    folder = Path(folder)
    if scale != "paper":
        status = ("ci scale: the CIFAR-10 and MNIST runs need LNBOOK_SCALE=paper, LNBOOK_CIFAR10_DIR or "
                  "LNBOOK_MNIST_DIR and, in practice, a GPU.")
        return status, _read(folder, CIFAR_FILE), _read(folder, MNIST_FILE)
    official = FitConfig.official(lr=0.1)
    trained, skipped = [], []
    for name, loader, depth_sweep, data, source, variable in (
        (CIFAR_FILE, cifar10_grayscale, True, OFFICIAL["dataset"], cifar_dir, "LNBOOK_CIFAR10_DIR"),
        (MNIST_FILE, mnist, False, "MNIST, pixels mapped to [-1, 1], random labels", mnist_dir, "LNBOOK_MNIST_DIR"),
    ):
        if source is None:
            skipped.append(f"{variable} is not set: the {_DATA[name]} runs are skipped")
            continue
        X, _ = loader(source)
        y = random_labels(len(X), 10, seed=OFFICIAL["seed"])
        hist = fit_random_labels(X, y, official_runs(depth_sweep=depth_sweep), official, seed=OFFICIAL["seed"],
                                 device=device)
        save_runs(folder / name, hist, {"data": data, "config": official.__dict__, "device": str(device)})
        trained.append(_DATA[name])
    parts = [f"paper scale: the {' and '.join(trained)} runs were trained now and stored in results/paper/recorded/"] if trained else []
    status = "; ".join(parts + skipped) + (" (the book never downloads data)." if skipped else ".")
    return status, _read(folder, CIFAR_FILE), _read(folder, MNIST_FILE)


def groups_curve(fits: dict[str, float], depth: int = 4, width: int = OFFICIAL["width"]) -> tuple[list[int], list[float]]:
    """The groups of the harness that divide ``width`` and the best LN-G fit of each at ``depth`` (for the figure)."""
    groups = [g for g in OFFICIAL["groups"] if width % g == 0]
    missing = [Run("lng", depth, g).label for g in groups if Run("lng", depth, g).label not in fits]
    if missing:
        raise ValueError(f"fits lacks the runs {missing}; pass the fits of official_runs()")
    return groups, [fits[Run("lng", depth, g).label] for g in groups]
