r"""LayerNorm as a sympy expression, for exact checks of the book's identities at small ``d``.

>>> import sympy as sp
>>> x, y = symbolic_layer_norm(3)
>>> sp.simplify(sum(y))     # LN(x) is orthogonal to the uniform vector
0
"""

from __future__ import annotations

import sympy as sp

from lnbook.util.validation import check_positive_int

__all__ = ["symbols_vector", "symbolic_layer_norm", "symbolic_centering_matrix", "symbolic_jacobian_formula"]


def symbols_vector(d: int, name: str = "x", real: bool = True) -> sp.Matrix:
    """A column vector of ``d`` real sympy symbols ``x0 .. x{d-1}``."""
    check_positive_int(d, "d", minimum=2)
    return sp.Matrix(sp.symbols(f"{name}0:{d}", real=real))


def symbolic_centering_matrix(d: int) -> sp.Matrix:
    """Exact :math:`P = I - \\mathbf 1 \\mathbf 1^\\top / d`."""
    check_positive_int(d, "d", minimum=2)
    return sp.eye(d) - sp.ones(d, d) / d


def symbolic_layer_norm(d: int, eps=0, x: sp.Matrix | None = None):
    """Return ``(x, LN(x))`` with LN written from its definition: ``(x - mean) / sqrt(var + eps)``.

    ``eps`` may be a number or a sympy symbol (declare it positive).
    """
    x = symbols_vector(d) if x is None else x
    mean = sum(x) / d
    centred = x - mean * sp.ones(d, 1)
    var = sum(c**2 for c in centred) / d
    return x, centred / sp.sqrt(var + eps)


def symbolic_jacobian_formula(x: sp.Matrix, eps=0) -> sp.Matrix:
    r"""The book's closed form :math:`J = (\sqrt d / r)(P - z z^\top / r^2)`, :math:`z = Px`, :math:`r^2 = |z|^2 + d\varepsilon`."""
    d = x.shape[0]
    P = symbolic_centering_matrix(d)
    z = P * x
    r = sp.sqrt((z.T * z)[0, 0] + d * eps)
    return sp.sqrt(d) / r * (P - z * z.T / r**2)
