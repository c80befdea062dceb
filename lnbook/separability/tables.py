"""The tables of chapter 2's lab: SSR and LSSR through the stages of the XOR network, and the network's output
on the four XOR points.

A value that rounding left in place of an exact 0 prints as "0 (rounding)", not as ``1.54×10⁻³³`` beside an
exact "0" in the same column (the chapter states LSSR = 0 there: screenshot read, issue 33).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from lnbook.util.tables import MINUS, Table, significant

__all__ = ["ROUNDING", "ratio_text", "stage_table", "eps_ssr_table", "xor_output_table"]

#: SSR and LSSR lie in [0, 1]; a value at most this far from 0 is float64 rounding of an exact 0 (the four XOR
#: points give 10⁻³³ to 10⁻³¹; a true ratio of the lab is above 10⁻³).
ROUNDING = 1e-12


def ratio_text(value: float) -> str:
    """An SSR or LSSR for a table: ``"0"`` for exactly 0, ``"0 (rounding)"`` for ``0 < |value| <= ROUNDING``, else
    three significant digits (:func:`lnbook.util.tables.significant`).

    >>> ratio_text(0.0), ratio_text(1.54e-33), ratio_text(0.6667)
    ('0', '0 (rounding)', '0.667')
    """
    value = float(value)
    if value == 0:
        return "0"
    if abs(value) <= ROUNDING:
        return "0 (rounding)"
    return significant(value)


def stage_table(stages: Mapping[str, tuple[float, float]]) -> Table:
    """One row per stage of a network, ``{"input": (ssr, lssr), ...}``, with the columns stage, SSR and LSSR."""
    return Table([[name, ratio_text(a), ratio_text(b)] for name, (a, b) in stages.items()], ["stage", "SSR", "LSSR"])


def eps_ssr_table(ssr_by_eps: Mapping[float, float]) -> Table:
    """One row per epsilon of the LayerNorm, ``{eps: ssr of the output}``: epsilon as a power of ten and the SSR as
    :func:`ratio_text` writes it (``"0 (rounding)"``, not ``2.2×10⁻³²`` between two exact zeros: screenshot read 48,
    item 15)."""
    from lnbook.util.tables import power_of_ten

    return Table([[power_of_ten(float(eps), ".0p"), ratio_text(v)] for eps, v in ssr_by_eps.items()],
                 ["ε of the LayerNorm", "SSR of the output"])


def _point(p) -> str:
    return "(" + ", ".join(f"{float(t):g}".replace("-", MINUS) for t in p) + ")"


def xor_output_table(X: torch.Tensor, y: torch.Tensor, output: torch.Tensor) -> Table:
    """One row per input point: the point as the text writes it (``"(−1, 1)"``, minus signs), whether it is in
    class 1, and the network's output (three significant digits)."""
    if not len(X) == len(y) == len(output):
        raise ValueError(f"X, y and output need one row per point, got {len(X)}, {len(y)} and {len(output)}")
    return Table([[_point(p), "yes" if int(c) == 1 else "no", significant(float(o))]
                  for p, c, o in zip(X.tolist(), y.tolist(), output.reshape(len(X), -1)[:, 0].tolist())],
                 ["input point", "class 1", "network output"])
