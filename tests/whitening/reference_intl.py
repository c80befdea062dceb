"""An independent NumPy re-implementation of INTL's formulas (float64), written from the research note
(``shared/notes/intl.md``, sections 1.1 and 1.3), not from lnbook: the tests compare lnbook.whitening with it.

Conventions of the official code: ``x`` is N x d; axis 1 centres each feature over the batch and whitens
the d x d covariance, axis 0 centres each sample over its features and whitens the N x N Gram, then mixes
samples: ``out = (xc^T W)^T``.
"""

import math

import numpy as np


def iternorm(x, T, axis):
    x = np.array(x, dtype=np.float64)
    N, d = x.shape
    if axis == 1:
        xc = x - x.mean(axis=0, keepdims=True)
        sigma = xc.T @ xc / (N - 1)
    else:
        xc = x - x.mean(axis=1, keepdims=True)
        sigma = xc @ xc.T / (d - 1)
    trace = np.trace(sigma)
    sigma_norm = sigma / trace
    projection = np.eye(sigma.shape[0])
    for _ in range(T):
        projection = 1.5 * projection - 0.5 * np.linalg.matrix_power(projection, 3) @ sigma_norm
    wm = projection / math.sqrt(trace)
    return xc @ wm if axis == 1 else (xc.T @ wm).T


def trace_loss(x, axis):
    x = np.array(x, dtype=np.float64)
    if axis == 0:
        x = x.T
    n = x.shape[0]
    x = x - x.mean(axis=0)
    var = (x**2).sum(axis=0) / (n - 1)
    return float(((var - 1) ** 2).sum())


def trade_off(batch_size, emb, axis):
    return (math.log2(batch_size) - 3) * 0.01 if axis == 0 else (math.log2(emb) - 3) * 0.01


def norm_mse(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return 2 - 2 * float((a * b).sum(axis=1).mean())


def intl(views, T, axis):
    """The objective for crops t_0..t_{V-1}: (1/(V-1)) sum_{i>=1} [norm_mse(t_i, t_0) + beta (TL(t_i) + TL(t_0))]."""
    N, d = np.shape(views[0])
    beta = trade_off(N, d, axis)
    t = [iternorm(v, T, axis) for v in views]
    total = sum(norm_mse(t[i], t[0]) + beta * (trace_loss(t[i], axis) + trace_loss(t[0], axis))
                for i in range(1, len(t)))
    return total / (len(t) - 1)
