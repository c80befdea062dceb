r"""One training loop for every experiment of the book: :func:`train`.

:func:`train` fits a model to a tensor dataset held in memory (the book's datasets are small:
at most CIFAR-10's 50 000 images), on the device of :func:`lnbook.get_device` unless told
otherwise, seeded, with a tqdm progress bar, and returns a :class:`History`:

* ``task="classification"``: cross-entropy on integer labels ``0..C-1`` (``C`` = the model's
  output width); the training accuracy is measured on the **whole training set** in eval mode
  after every ``log_every`` epochs (the "fit" that random-label experiments report), and
  training stops early at 100% fit (``stop_at_fit=True``); ``fit="last"`` measures it after the last
  epoch only (a run judged on held-out data, ``stop_at_fit=False``, then skips a pass over the training
  set at every log and trains exactly as with ``fit="every"``);
* ``task="regression"``: mean squared error; it stops early once the loss is below
  ``target_loss`` (if given);
* ``task="next_token"``: ``X`` and ``y`` are ``(n, T)`` long tensors of token ids (``y`` is ``X``
  shifted by one token) and the model maps ``(batch, T)`` to logits ``(batch, T, vocab)``;
  cross-entropy over every position, and the accuracy is the share of positions whose next
  token is predicted right (a language model, chapter 7).

Self-supervised training on two augmented views of unlabelled data (chapter 8) has no labels and a loss
of two outputs; :func:`train_views` is its loop (SGD with momentum, per-step linear warm-up and cosine decay,
:func:`warmup_cosine_lr`, as in the official code of INTL and most joint-embedding methods).

``X`` is a float tensor, or a ``torch.long`` tensor of token ids for a sequence model (e.g. a
:class:`lnbook.ml.models.TinyTransformer` wrapped in :class:`lnbook.ml.models.LastPosition`).

An *epoch* is one pass over the data in mini-batches of ``batch_size`` (``None``: the full
batch, so an epoch is one step). Mini-batches are drawn from a ``torch.Generator`` seeded with
``seed``; the model's initialisation is the caller's (seed before building it). The same call
on the same device prints the same numbers.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from lnbook.util.device import resolve_device
from lnbook.util.progress import progress_bar
from lnbook.util.validation import check_positive_int

__all__ = ["History", "TrainingDiverged", "train", "train_for_epochs", "evaluate", "predict", "model_device", "warmup_cosine_lr",
           "train_views"]

TASKS = ("classification", "regression", "next_token")
OPTIMIZERS = ("sgd", "adam", "adamw")
FITS = ("every", "last")


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the message says at which epoch and what to try."""


@dataclass
class History:
    """What a run of :func:`train` recorded.

    ``epochs[i]`` is the number of completed epochs when ``loss[i]`` (mean training loss of that
    epoch's mini-batches) and ``accuracy[i]`` (fit on the whole training set, classification only;
    NaN at the logs where it was not measured, :func:`train`'s ``fit="last"``) were recorded;
    ``val_loss[i]`` and ``val_accuracy[i]`` likewise on held-out data, when
    :func:`train` was given ``validation=``. ``train_seconds`` counts the optimisation steps only (not the evaluation passes),
    so ``throughput`` is training samples per second.
    """

    task: str
    epochs: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    samples_seen: int = 0
    train_seconds: float = 0.0
    stopped_early: bool = False
    device: str = "cpu"
    label: str = ""
    val_loss: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)

    @property
    def final_loss(self) -> float:
        return self.loss[-1] if self.loss else math.nan

    @property
    def final_accuracy(self) -> float:
        return self.accuracy[-1] if self.accuracy else math.nan

    @property
    def best_accuracy(self) -> float:
        """The highest measured fit (NaN entries, logs where the fit was not measured, are skipped)."""
        return max((a for a in self.accuracy if not math.isnan(a)), default=math.nan)

    @property
    def epochs_run(self) -> int:
        return self.epochs[-1] if self.epochs else 0

    @property
    def throughput(self) -> float:
        """Training samples per second (optimisation steps only)."""
        return self.samples_seen / self.train_seconds if self.train_seconds > 0 else math.nan

    def epochs_to_fit(self, level: float = 1.0) -> int | None:
        """The first recorded epoch at which the training accuracy reached ``level`` (None if never)."""
        for e, a in zip(self.epochs, self.accuracy):
            if a >= level:
                return e
        return None

    def summary(self) -> str:
        """One line: label, epochs, final loss and fit, early stop, throughput."""
        parts = [self.label or "run", f"{self.epochs_run} epochs", f"loss {self.final_loss:.4g}"]
        if self.task != "regression":
            parts.append(f"train accuracy {self.final_accuracy:.4f}")
            if self.val_accuracy:
                parts.append(f"held-out accuracy {self.val_accuracy[-1]:.4f}")
        if self.stopped_early:
            parts.append("stopped early")
        parts.append(f"{self.throughput:,.0f} samples/s on {self.device}")
        return " | ".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "History":
        return cls(**data)


def _check_data(X, y, task: str, device) -> tuple[torch.Tensor, torch.Tensor]:
    if task == "next_token":
        for name, t in (("X", X), ("y", y)):
            if not isinstance(t, torch.Tensor) or t.dtype != torch.long or t.dim() != 2:
                raise TypeError(f"next_token: {name} must be a (n_sequences, T) torch.long tensor of token ids")
        if X.shape != y.shape or len(X) == 0:
            raise ValueError(f"next_token: X and y must have the same non-empty shape, got {tuple(X.shape)} and {tuple(y.shape)}")
        return X.to(device), y.to(device)
    if not isinstance(X, torch.Tensor) or not (torch.is_floating_point(X) or X.dtype == torch.long):
        raise TypeError(
            "X must be a floating-point torch.Tensor of shape (n_samples, ...) "
            "(or a torch.long tensor of token ids for a sequence model)"
        )
    if not isinstance(y, torch.Tensor):
        raise TypeError("y must be a torch.Tensor (long labels for classification, floats for regression)")
    if X.dim() < 2:
        raise ValueError(f"X must have shape (n_samples, features...), got {tuple(X.shape)}")
    if len(X) != len(y):
        raise ValueError(f"X has {len(X)} samples but y has {len(y)}; they must match")
    if len(X) == 0:
        raise ValueError("the dataset is empty")
    if torch.is_floating_point(X) and not bool(torch.isfinite(X).all()):
        raise ValueError("X contains NaN or infinite values; clean the data first")
    if task == "classification":
        if y.dtype != torch.long or y.dim() != 1:
            raise TypeError(f"classification labels must be a 1-D torch.long tensor, got {y.dtype} of shape {tuple(y.shape)}")
    else:
        if not torch.is_floating_point(y):
            raise TypeError("regression targets must be a floating-point tensor")
        if not bool(torch.isfinite(y).all()):
            raise ValueError("y contains NaN or infinite values; clean the targets first")
    return X.to(device), y.to(device)


def _check_labels(y: torch.Tensor, n_outputs: int) -> None:
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi >= n_outputs:
        raise ValueError(
            f"labels must lie in 0..{n_outputs - 1} (the model has {n_outputs} outputs), "
            f"got labels from {lo} to {hi}"
        )


def _batches(n: int, batch_size: int | None, generator: torch.Generator):
    if batch_size is None or batch_size >= n:
        yield None
        return
    order = torch.randperm(n, generator=generator)
    for start in range(0, n, batch_size):
        yield order[start : start + batch_size]


def model_device(model: nn.Module) -> torch.device:
    """The device of ``model``'s first parameter (or buffer); the CPU for a model without either."""
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


@torch.no_grad()
def _outputs(model: nn.Module, X: torch.Tensor, batch_size: int) -> torch.Tensor:
    """The model's outputs on ``X`` in eval mode, on the model's device (``X`` is moved there chunk by chunk)."""
    device = model_device(model)
    was_training = model.training
    model.eval()
    try:
        outs = [model(X[i : i + batch_size].to(device)) for i in range(0, len(X), batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(outs)


def predict(model: nn.Module, X: torch.Tensor, batch_size: int = 4096) -> torch.Tensor:
    """The model's outputs on ``X`` in eval mode, in chunks of ``batch_size`` (no gradient), computed on the
    model's device whatever device ``X`` is on, returned on the CPU."""
    return _outputs(model, X, batch_size).cpu()


#: what :func:`train_for_epochs` fixes: every epoch of the budget, the training fit measured at the last one only, no
#: progress bar and no printed report (a lab's comparison of variants; the keywords were repeated in every lab cell:
#: screenshot read, issue 33)
FOR_EPOCHS = {"stop_at_fit": False, "fit": "last", "progress": False, "report": False}


def train_for_epochs(model: nn.Module, X: torch.Tensor, y: torch.Tensor, **setting) -> History:
    """:func:`train` for exactly ``epochs`` epochs, quietly: :data:`FOR_EPOCHS` (no stop at a full fit, the fit
    measured after the last epoch, no bar, no report) plus the caller's ``setting`` (``epochs``, ``lr``, ``seed``,
    ``validation``, ...). Refuses a ``setting`` that sets one of :data:`FOR_EPOCHS`' keywords: call :func:`train`."""
    clash = sorted(set(setting) & set(FOR_EPOCHS))
    if clash:
        raise TypeError(f"train_for_epochs fixes {clash}; call train(...) to set them")
    return train(model, X, y, **FOR_EPOCHS, **setting)


def evaluate(model: nn.Module, X: torch.Tensor, y: torch.Tensor, task: str = "classification") -> tuple[float, float]:
    """``(loss, accuracy)`` on the whole of ``(X, y)`` in eval mode; accuracy is NaN for regression. Computed on the
    model's device (a model trained by :func:`train` stays on its device) whatever device ``X`` and ``y`` are on."""
    out = _outputs(model, X, 4096)
    y = y.to(out.device)
    if task in ("classification", "next_token"):
        return float(_cross_entropy(out, y)), float((out.argmax(-1) == y).float().mean())
    return float(F.mse_loss(out.reshape(y.shape), y)), math.nan


def _cross_entropy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits ``(..., C)`` against labels ``(...)`` (one label or one per position)."""
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def _optimizer(name: str, params, lr: float, momentum: float, weight_decay: float) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def train(
    model: nn.Module,
    X: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    task: str = "classification",
    batch_size: int | None = 128,
    optimizer: str = "sgd",
    lr: float = 0.1,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    lr_schedule: Callable[[int], float] | None = None,
    seed: int = 0,
    device: torch.device | str | None = None,
    log_every: int = 1,
    stop_at_fit: bool = True,
    fit: str = "every",
    target_loss: float | None = None,
    progress: bool = True,
    label: str = "",
    report: bool = True,
    validation: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> History:
    """Train ``model`` on ``(X, y)`` and return its :class:`History` (the model is trained in place, on ``device``,
    default :func:`lnbook.util.device.get_device`, and stays there; :func:`evaluate` and :func:`predict` take inputs
    on any device).

    ``lr_schedule(epoch)`` (optional) multiplies the learning rate during that epoch (0-based).
    ``log_every``: record loss and training-set fit every that many epochs (and at the last one).
    ``fit="last"`` (classification and next-token tasks, with ``stop_at_fit=False``): measure the
    training-set fit after the last epoch only, NaN at the other logs; the optimisation is the same.
    ``report``: print :meth:`History.summary` at the end (training throughput included).
    ``validation=(X_val, y_val)``: also record loss and accuracy on that held-out data at every log
    (not counted in the throughput; early stopping still looks at the training fit only).
    Raises :class:`TrainingDiverged` when the loss becomes NaN or infinite.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    epochs = check_positive_int(epochs, "epochs")
    log_every = check_positive_int(log_every, "log_every")
    if fit not in FITS:
        raise ValueError(f"fit must be one of {FITS}, got {fit!r}")
    if fit == "last" and stop_at_fit:
        raise ValueError("fit='last' measures the fit after the last epoch only, so it cannot stop at 100% fit: "
                         "pass stop_at_fit=False")
    if batch_size is not None:
        batch_size = check_positive_int(batch_size, "batch_size")
    if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    device = resolve_device(device)
    X, y = _check_data(X, y, task, device)
    if validation is not None:
        if not isinstance(validation, (tuple, list)) or len(validation) != 2:
            raise TypeError("validation must be a pair (X_val, y_val)")
        X_val, y_val = _check_data(validation[0], validation[1], task, device)
    model.to(device)
    dtype = next((p.dtype for p in model.parameters()), X.dtype)
    if torch.is_floating_point(X):
        X = X.to(dtype)
    if validation is not None and torch.is_floating_point(X_val):
        X_val = X_val.to(dtype)
    if task == "regression":
        y = y.to(dtype)
    else:
        with torch.no_grad():
            was_training = model.training
            model.eval()
            n_outputs = model(X[:1]).shape[-1]
            model.train(was_training)
        _check_labels(y, n_outputs)
        if validation is not None:
            _check_labels(y_val, n_outputs)

    generator = torch.Generator().manual_seed(seed)
    opt = _optimizer(optimizer, model.parameters(), float(lr), momentum, weight_decay)
    base_lrs = [g["lr"] for g in opt.param_groups]
    history = History(task=task, device=str(device), label=label)
    loss_fn = F.mse_loss if task == "regression" else _cross_entropy
    n = len(X)

    bar = progress_bar(range(epochs), desc=label or "training", enabled=bool(progress), leave=True)
    for epoch in bar:
        if lr_schedule is not None:
            for g, base in zip(opt.param_groups, base_lrs):
                g["lr"] = base * float(lr_schedule(epoch))
        model.train()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        total, count = torch.zeros((), device=device, dtype=torch.float64), 0
        for idx in _batches(n, batch_size, generator):
            xb, yb = (X, y) if idx is None else (X[idx.to(device)], y[idx.to(device)])
            out = model(xb)
            loss = loss_fn(out.reshape(yb.shape), yb) if task == "regression" else loss_fn(out, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach().double() * len(xb)
            count += len(xb)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        history.train_seconds += time.perf_counter() - start
        history.samples_seen += count
        epoch_loss = float(total) / count
        if not math.isfinite(epoch_loss):
            raise TrainingDiverged(
                f"{label or 'training'}: the loss became {epoch_loss} in epoch {epoch + 1}; "
                "lower the learning rate (or check the data scale)"
            )
        last = epoch + 1 == epochs
        if (epoch + 1) % log_every == 0 or last:
            history.epochs.append(epoch + 1)
            history.loss.append(epoch_loss)
            if validation is not None:
                v_loss, v_acc = evaluate(model, X_val, y_val, task)
                history.val_loss.append(v_loss)
                if task != "regression":
                    history.val_accuracy.append(v_acc)
            if task != "regression":
                acc = evaluate(model, X, y, task)[1] if fit == "every" or last else math.nan
                history.accuracy.append(acc)
                bar.set_postfix(loss=f"{epoch_loss:.4f}", fit=f"{acc:.3f}", refresh=False)
                if stop_at_fit and acc >= 1.0:
                    history.stopped_early = not last
                    break
            else:
                bar.set_postfix(loss=f"{epoch_loss:.3g}", refresh=False)
                if target_loss is not None and epoch_loss <= target_loss:
                    history.stopped_early = not last
                    break
    bar.close()
    if report:
        print(history.summary())
    return history


def warmup_cosine_lr(step: int, total: int, warmup: int, base: float, final_ratio: float = 0.001) -> float:
    """The learning rate at ``step`` (0-based) of ``total``: linear warm-up over the first ``warmup`` steps
    (``base * (step + 1) / warmup``), then a half cosine from ``base`` down to ``final_ratio * base`` at the last
    step (the schedule of INTL's official code, per step)."""
    total = check_positive_int(total, "total")
    warmup = check_positive_int(warmup, "warmup", minimum=0)
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < total:
        raise ValueError(f"step must be an integer in 0..{total - 1}, got {step!r}")
    if step < warmup:
        return base * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    end = final_ratio * base
    return end + (base - end) * 0.5 * (1 + math.cos(math.pi * t))


def train_views(
    model: nn.Module,
    X: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    augment: Callable[[torch.Tensor, torch.Generator, int], torch.Tensor],
    *,
    epochs: int,
    batch_size: int,
    lr: float,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    warmup_epochs: int = 0,
    final_lr_ratio: float = 0.001,
    seed: int = 0,
    device: torch.device | str | None = None,
    on_step: Callable[[int, int, nn.Module], None] | None = None,
    progress: bool = False,
    label: str = "",
) -> list[float]:
    """Self-supervised training of ``model`` on two views of each row of ``X``; returns the loss of every step.

    Every epoch draws a permutation of the rows from a CPU ``torch.Generator`` seeded with ``seed`` and cuts it
    into ``len(X) // batch_size`` full mini-batches (the remainder is dropped). For each batch ``x`` the views
    ``augment(x, generator, 0)`` and ``augment(x, generator, 1)`` are drawn from the same generator on the CPU
    (so every device sees the same views), moved to ``device`` (default :func:`lnbook.util.device.get_device`),
    and ``loss_fn(model(v0), model(v1))`` is minimised by SGD with momentum and weight decay, the learning rate
    following :func:`warmup_cosine_lr` per step (warm-up over ``warmup_epochs`` epochs). After each step
    ``on_step(step, total_steps, model)`` is called (for recordings; it may switch the model to eval mode, the
    next step switches it back). The model's initialisation is the caller's (seed before building it); the
    model is left on ``device`` in eval mode. Raises :class:`TrainingDiverged` when a loss is NaN or infinite.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    epochs = check_positive_int(epochs, "epochs")
    batch_size = check_positive_int(batch_size, "batch_size", minimum=2)
    warmup_epochs = check_positive_int(warmup_epochs, "warmup_epochs", minimum=0)
    if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    if len(X) < batch_size:
        raise ValueError(f"X has {len(X)} rows, fewer than one mini-batch of {batch_size}: use a smaller batch_size")
    device = resolve_device(device)
    generator = torch.Generator().manual_seed(seed)
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    steps_per_epoch = len(X) // batch_size
    total, warmup = epochs * steps_per_epoch, warmup_epochs * steps_per_epoch
    steps = progress_bar(range(total), desc=label or "training", leave=False, enabled=bool(progress))
    losses: list[float] = []
    order = torch.randperm(len(X), generator=generator)  # drawn once before the first epoch (kept: it fixes the stream)
    for step in steps:
        if step % steps_per_epoch == 0:
            order = torch.randperm(len(X), generator=generator)
        start = (step % steps_per_epoch) * batch_size
        x = X[order[start:start + batch_size]]
        v0, v1 = augment(x, generator, 0).to(device), augment(x, generator, 1).to(device)
        for group in opt.param_groups:
            group["lr"] = warmup_cosine_lr(step, total, warmup, lr, final_lr_ratio)
        model.train()
        loss = loss_fn(model(v0), model(v1))
        if not torch.isfinite(loss):
            raise TrainingDiverged(
                f"{label or 'training'} diverged at step {step}: loss {float(loss.detach())}; lower the learning rate"
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(step, total, model)
    model.eval()
    return losses
