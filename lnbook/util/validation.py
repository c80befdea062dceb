"""Input checks shared by every public function of :mod:`lnbook`.

Each check raises a :class:`TypeError` or :class:`ValueError` whose message names the
argument and says what to do, so that bad input never turns into a silent NaN.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode


def traced_here(*tensors) -> bool:
    """True when the code running now, in this thread, is being traced by ``torch.compile`` or ``torch.export``
    rather than computing: Dynamo is tracing it (``torch.compiler.is_dynamo_compiling``, true only inside Dynamo's
    own trace), or a non-strict ``torch.export`` is running (``torch.compiler.is_compiling``) and one of
    ``tensors`` is a fake tensor of its trace.

    ``torch.compiler.is_compiling()`` alone is not enough: non-strict ``torch.export`` sets it process-wide while
    it traces, so a check that skipped itself on it alone would also be skipped by every other thread's eager calls
    made meanwhile. Pass the tensors the skipped code would read (a module's parameters, its inputs).
    """
    if torch.compiler.is_dynamo_compiling():
        return True
    if not torch.compiler.is_compiling():
        return False
    from torch._subclasses.fake_tensor import is_fake

    return any(isinstance(t, torch.Tensor) and is_fake(t) for t in tensors)


def under_transform(x) -> bool:
    """True when ``x`` is being traced or transformed (``torch.func`` vmap/grad/jacrev, ``torch.fx``,
    ``torch.compile``, ``torch.export``): its values are not available, so value checks must be skipped.

    Value checks (``bool(tensor)``) are data-dependent Python control flow, which ``torch.func.vmap`` and
    tracing cannot follow; the functions of :mod:`lnbook` run them in eager mode only and compute the
    same formula under transforms. Whether ``x`` itself is traced is asked (:func:`traced_here`), not torch's
    process-wide export flag, so another thread's ``torch.export`` does not switch this thread's checks off.
    """
    if traced_here(x):  # first: Dynamo cannot trace the functorch query below (fullgraph=True fails)
        return True
    if isinstance(x, torch.fx.Proxy):
        return True
    return isinstance(x, torch.Tensor) and bool(torch._C._functorch.is_functorch_wrapped_tensor(x))


VMAP_HINT = (
    "this input check looks at tensor values, which torch.func.vmap cannot do; call the function with "
    "check=False inside vmap (it is then pure tensor code; the functions that take check= are also batched over "
    "leading dimensions, so vmap is rarely needed)"
)

EXPORT_HINT = (
    "this input check looks at tensor values, which torch.export cannot do (it traces with symbolic values, and "
    "PyTorch reports GuardOnDataDependentSymNode); call the function with check=False in a module you export (it is "
    "then pure tensor code; check=True works in eager mode and under torch.compile)"
)


def holds(condition: torch.Tensor) -> bool:
    """``bool(condition)`` for a value check on a tensor, with a clear message under ``torch.func.vmap``.

    Value checks are data-dependent Python control flow: they run in eager mode, under autograd and under
    ``torch.func.grad``, but not under ``vmap``; there this raises ``RuntimeError`` saying to pass
    ``check=False`` (the convention of every function of :mod:`lnbook` that takes ``check=``). Under
    ``torch.export`` (symbolic tracing, where PyTorch raises ``GuardOnDataDependentSymNode``) it raises
    ``ValueError`` with the same advice (:data:`EXPORT_HINT`).
    """
    try:
        return bool(condition)
    except GuardOnDataDependentSymNode as err:
        raise ValueError(EXPORT_HINT) from err
    except RuntimeError as err:
        if "data-dependent control flow" in str(err):
            raise RuntimeError(VMAP_HINT) from err
        raise


def as_float_tensor(x, name: str = "x", min_dim: int = 1, *, dtypes=None, check: bool | None = None,
                    why: str = "") -> torch.Tensor:
    """Return ``x`` if it is a floating-point torch tensor with at least ``min_dim`` dimensions.

    Raises ``TypeError`` for anything that is not a floating-point tensor (or, with ``dtypes``, not one of
    those dtypes; ``why`` says in the message why only they are accepted) and ``ValueError`` for too few
    dimensions or non-finite entries.

    ``check`` decides the value check (finiteness): ``None`` (default) runs it in eager mode and skips it under
    ``torch.func`` transforms and tracing (:func:`under_transform`); ``True`` always runs it through
    :func:`holds` (so under ``vmap`` the error says to pass ``check=False``; under ``grad`` it still runs);
    ``False`` never runs it. Type and shape are always checked.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor, got {type(x).__name__}; "
            f"convert it with torch.as_tensor({name}, dtype=torch.float64)"
        )
    if not torch.is_floating_point(x):
        raise TypeError(
            f"{name} must have a floating-point dtype, got {x.dtype}; "
            f"convert it with {name}.double() or {name}.float()"
        )
    if dtypes is not None and x.dtype not in tuple(dtypes):
        allowed = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(
            f"{name} has dtype {x.dtype}; only {allowed} is accepted here{f' ({why})' if why else ''}: "
            f"convert it with {name}.float() or {name}.double()"
        )
    if x.dim() < min_dim:
        raise ValueError(
            f"{name} must have at least {min_dim} dimension(s) (features on the last one), "
            f"got shape {tuple(x.shape)}"
        )
    if check is False or (check is None and under_transform(x)):
        return x
    if not holds(torch.isfinite(x).all()):
        bad = int((~torch.isfinite(x)).sum())
        raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN or inf); clean the input first")
    return x


def check_eps(eps, name: str = "eps") -> float:
    """Return ``eps`` as a float after checking that it is a finite number >= 0."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(eps).__name__}")
    eps = float(eps)
    if not eps >= 0 or eps == float("inf"):
        raise ValueError(f"{name} must be a finite number >= 0, got {eps}")
    return eps


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    """Return ``value`` if it is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_width(d: int, minimum: int, what: str) -> None:
    """Raise if the feature width ``d`` (last dimension) is below ``minimum``."""
    if d < minimum:
        raise ValueError(
            f"{what} needs at least {minimum} features on the last dimension, got {d}; "
            "a single feature has zero variance, so its normalisation is undefined"
        )


def check_labelled_samples(X, y, what: str = "build_ln_net") -> tuple[np.ndarray, np.ndarray]:
    """Return ``(X, y)`` as a float64 ``(m, n)`` array and an int64 ``(m,)`` array of labels, after checking them.

    A 1-d ``X`` is read as ``m`` samples of dimension 1. Raises ``TypeError`` for non-numeric samples or
    non-integer labels, ``ValueError`` for a wrong shape, fewer than 2 samples, non-finite values (naming
    the rows) or negative labels; ``what`` names the caller in the messages.
    """
    if isinstance(X, torch.Tensor):
        X = X.detach().cpu().numpy()
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"X must be a real (m, n) array of samples, got {type(X).__name__}") from err
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"X must have shape (m, n) (one sample per row), got shape {X.shape}")
    X = np.ascontiguousarray(X)  # torch.from_numpy refuses negative strides (a reversed view)
    m, n = X.shape
    if n < 1:
        raise ValueError("X must have at least one feature (n >= 1)")
    if m < 2:
        raise ValueError(f"{what} needs at least 2 samples, got m={m}")
    if not np.isfinite(X).all():
        bad = np.argwhere(~np.isfinite(X).all(axis=1)).ravel()
        raise ValueError(f"X contains non-finite values (NaN or inf) in rows {bad[:10].tolist()}; clean the input first")
    y_arr = np.asarray(y)
    if y_arr.shape != (m,):
        raise ValueError(f"y must have shape ({m},) (one label per sample), got shape {y_arr.shape}")
    if y_arr.dtype.kind == "f":
        if not np.isfinite(y_arr).all() or not np.all(y_arr == np.round(y_arr)):
            raise TypeError("y must hold integer class labels 0, 1, ..., K-1")
    elif y_arr.dtype.kind not in "iub":
        raise TypeError(f"y must hold integer class labels 0, 1, ..., K-1, got dtype {y_arr.dtype}")
    y_arr = y_arr.astype(np.int64)
    if (y_arr < 0).any():
        raise ValueError("y must hold non-negative integer labels 0, 1, ..., K-1 (logit j scores label j)")
    return X, y_arr


def group_identical_samples(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, int]:
    """Group identical rows of ``X``: returns ``(group index of each row, number of distinct rows)``.

    Raises ``ValueError`` naming two indices if identical rows carry different labels: no function, hence
    no network, can separate them.
    """
    uniq, inverse = np.unique(X, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    if len(uniq) < len(X):
        order = np.lexsort((y, inverse))
        g, lab = inverse[order], y[order]
        clash = np.nonzero((g[1:] == g[:-1]) & (lab[1:] != lab[:-1]))[0]
        if len(clash):
            a, b = int(order[clash[0]]), int(order[clash[0] + 1])
            a, b = min(a, b), max(a, b)
            raise ValueError(
                f"samples {a} and {b} are identical but have different labels ({int(y[a])} and {int(y[b])}); "
                "no function, hence no network, can separate them: remove or relabel one of them"
            )
    return inverse, len(uniq)
