"""What chapter 5 says about LN-G's cost, from the committed benchmark run (``benchmarks/recorded/lng_speed_cpu.json``).

:func:`speed_sentences` turns the run of ``benchmarks/lng_speed.py`` into the numbers and sentences the chapter
quotes (each glued by the lab ``ch05_drop_in_lab`` under its name), so the lab holds no prose in f-strings and the
sentences are tested. Timings are never part of the tests: these functions only read a recorded run.
Tests: tests/group_ln/test_speed_sentences.py.
"""

from __future__ import annotations

from lnbook.util.tables import number_range

__all__ = ["LAB_SHAPE", "speed_sentences"]

LAB_SHAPE = (128, 128)  # (batch, width) of the lab's own networks
_RATIO, _QUART, _VS_LN, _G1_VS_LN = "LN-G / kernel G=1", "LN-G / kernel G=1 quartiles", "LN-G / nn.LayerNorm", \
    "kernel G=1 / nn.LayerNorm"


def _size(r: dict) -> str:
    return f"batch {r['batch']} width {r['d']} G={r['groups']}"


def speed_sentences(bench: dict) -> dict[str, str]:
    """``{glue name: text}`` for the chapter's paragraph on LN-G's cost, from a recorded benchmark run.

    ``bench`` is the JSON of ``benchmarks/lng_speed.py`` (``rows``, ``goal``, ``missed``, ``blocks``...). Raises
    ``ValueError`` when its ``missed`` list disagrees with its rows (a run edited by hand, or written by another
    version of the benchmark), or when it has no row at the lab's size :data:`LAB_SHAPE`.
    """
    rows, goal = bench.get("rows") or [], bench.get("goal")
    if not rows or goal is None:
        raise ValueError("bench must be a run of benchmarks/lng_speed.py: it needs 'rows' and 'goal'")
    missed = [r for r in rows if r[_RATIO] > goal]
    if bench.get("missed") != [_size(r) for r in missed]:
        raise ValueError(f"the run's 'missed' {bench.get('missed')} disagrees with its rows {[_size(r) for r in missed]}")
    lab = [r for r in rows if (r["batch"], r["d"]) == LAB_SHAPE]
    if not lab:
        raise ValueError(f"the run has no row at the lab's size batch {LAB_SHAPE[0]}, width {LAB_SHAPE[1]}")
    worst = max(rows, key=lambda r: r[_RATIO])
    best = min(rows, key=lambda r: r[_VS_LN])  # no quartiles against nn.LayerNorm: the same quantity per size instead
    same = [r[_G1_VS_LN] for r in rows if (r["batch"], r["d"]) == (best["batch"], best["d"])]
    g1 = [r[_G1_VS_LN] for r in lab]  # measurements of one quantity: their range
    lab_worst = max(r[_RATIO] for r in lab)
    q3 = max(r[_QUART][1] for r in rows)
    if missed:
        misses = (
            f"{len(missed)} of its {len(rows)} sizes miss it: "
            + "; ".join(f"batch {r['batch']}, width {r['d']}, groups of {r['m']}: {r[_RATIO]:.2f} times (quartiles "
                        f"{r[_QUART][0]:.2f} to {r[_QUART][1]:.2f})" for r in missed)
            + f"; {sum(r[_QUART][0] <= goal for r in missed)} of them have a lower quartile at or below the goal, "
            "so are not resolved from the run's noise"
        )
    else:
        misses = f"no size misses it, and the largest upper quartile of the per-block ratios is {q3:.2f}"
    return {
        "ch05-lng-speed-grouping-worst": f"{worst[_RATIO]:.2f}",
        "ch05-lng-speed-grouping-worst-m": f"{worst['m']}",
        "ch05-lng-speed-ln-worst": f"{max(r[_VS_LN] for r in rows):.2f}",
        "ch05-lng-speed-ln-best": f"{best[_VS_LN]:.2f}",
        "ch05-lng-speed-lab-g1": number_range(min(g1), max(g1), ".2f"),  # "costs 1.31–1.52 times": a bare range, en dash
        "ch05-lng-speed-ln-best-size": f"batch {best['batch']}, width {best['d']}",
        "ch05-lng-speed-ln-best-g1": f"{min(same):.2f} to {max(same):.2f}",
        "ch05-lng-speed-blocks": f"{bench['blocks']}",
        "ch05-lng-speed-lab-worst": f"{lab_worst:.2f}",
        "ch05-lng-speed-lab-verdict": "meets the goal at every group count" if lab_worst <= goal else "misses the goal",
        "ch05-lng-speed-verdict": "the goal is not met" if missed else "the goal is met at every size",
        "ch05-lng-speed-misses": misses,
        # no "at every benchmarked size": the chapter prints this sentence about a recorded run of an earlier
        # kernel, and the run does not back a claim about every size of the kernel as shipped (ch5 read 12)
        "ch05-lng-speed-cost": (f"misses the goal of {goal:g} times the same operator with one group at some sizes"
                                if missed else
                                f"costs no more than {goal:g} times the same operator with one group"),
        "ch05-lng-speed-allocator": bench.get("allocator", "glibc defaults"),
    }
