"""Why LayerNorms were refused, in words a table cell can hold: :func:`summarise_refusals`.

The fold's verdicts (:class:`lnbook.folding.fold.LayerNormVerdict`) say why each LayerNorm is not foldable, naming
the operation and the module (``the output of aten.layer_norm.default at encoder.layer.0.output.LayerNorm has a
per-feature gain, so its mean varies with the input``). A model with twelve refused LayerNorms has twelve such
messages that differ only in the place. :func:`refusal_kind` says what a message means without the place, and
:func:`summarise_refusals` counts the kinds: ``3 LayerNorms: the LayerNorm before it has a per-feature gain, so the
mean of its input varies with the input``. A message of no known kind is its own kind, whole (never cut); the full
messages stay in the summary (:attr:`RefusalSummary.messages`) for the reader who opens them.

:func:`verdict_groups` is a fold report in a few rows, for a page: the LayerNorms grouped by verdict and by what the
refusal means, their names written once with their layer numbers as a range (``encoder.layer.{0-5}.output.LayerNorm``)
by :func:`name_ranges`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from lnbook.util.tables import Details, Lines, Table

__all__ = ["refusal_kind", "short_reason", "RefusalSummary", "summarise_refusals", "name_ranges", "module_ranges", "verdict_groups"]

_SWAP = "foldable, not swapped: "
# why a writer (a linear layer, an embedding) cannot be centred, after "... cannot be centred: "
_WRITER_REASONS = (
    (re.compile(r"^read by .*(?:does not carry a shift|not a LayerNorm input|not only indexed)"),
     "another operation reads its output and would change"),
    (re.compile(r"^read by .* as its weight or bias"), "another operation reads its output as a weight or bias"),
    (re.compile(r"^it is returned as an output of the model"), "its output is also an output of the model"),
    (re.compile(r"^parameter '.*' is also read by .*"), "its weight is read by another operation too (shared or tied, or looked up twice)"),
    (re.compile(r"has max_norm set"), "it has max_norm set"),
    (re.compile(r"weights are computed in the forward pass"), "its weights are computed in the forward pass"),
)
# a verdict's reason -> what it means, without the place; the first pattern that matches decides
_KINDS = (
    (re.compile(r"^the output of .* has a per-feature gain, so its mean varies with the input$"),
     "the LayerNorm before it has a per-feature gain, so the mean of its input varies with the input"),
    (re.compile(r"^the output of .* has a bias that is not centred$"), "the LayerNorm before it has a bias that is not centred"),
    (re.compile(r"^the output of (?P<kind>[\w ]+?) '.*' is not zero-mean and cannot be centred: (?P<why>.*)$"), None),
    (re.compile(r"^the output of .* is written along axis -?\d+ \(of \d+\), but the LayerNorm normalises its axis"),
     "a writer before it writes another axis than the one the LayerNorm normalises"),
    (re.compile(r"^the model input '.*' is not zero-mean by construction$"), "it reads the model input, which is not zero-mean"),
    (re.compile(r"^'.*' is not zero-mean$"), "it reads a parameter or buffer that is not zero-mean"),
    (re.compile(r"^the output of .* \(an elementwise nonlinearity\) is not known to be zero-mean"),
     "an elementwise nonlinearity before it makes its input not zero-mean"),
    (re.compile(r"^the output of .* is not known to be zero-mean"), "an operation before it has no rule that keeps the mean zero"),
    (re.compile(r" is mutated in place by "), "its input is changed in place"),
    (re.compile(r"(?: adds .* that is constant along the features|^a constant .* is added along the features)$"),
     "a constant along the features is added to its input"),
    (re.compile(r" normalises several dimensions$"), "a norm before it normalises several dimensions"),
    (re.compile(r"^" + _SWAP + r"a functional layer_norm call"), _SWAP + "a functional layer_norm call, not a module"),
    (re.compile(r"^" + _SWAP + r"its module '.*' is an? (?P<cls>\w+), not exactly nn\.LayerNorm"), None),
    (re.compile(r"^" + _SWAP + r"its module '.*' has forward hooks"), _SWAP + "its module has forward hooks"),
    (re.compile(r"^" + _SWAP + r"its module '.*' normalises over \d+ dimensions"),
     _SWAP + "its module normalises over several dimensions"),
)

# what a kind means in a few words, for a table cell (the kind itself and the full messages go below the table)
_SHORT = {
    "the LayerNorm before it has a per-feature gain, so the mean of its input varies with the input": "a gain before it",
    "the LayerNorm before it has a bias that is not centred": "an uncentred bias before it",
    "a writer before it writes another axis than the one the LayerNorm normalises": "a writer along another axis",
    "it reads the model input, which is not zero-mean": "reads the model input",
    "it reads a parameter or buffer that is not zero-mean": "reads an uncentred parameter",
    "an elementwise nonlinearity before it makes its input not zero-mean": "a nonlinearity before it",
    "an operation before it has no rule that keeps the mean zero": "an operation with no rule",
    "its input is changed in place": "input changed in place",
    "a constant along the features is added to its input": "a constant added to its input",
    "a norm before it normalises several dimensions": "a norm over several axes before it",
    _SWAP + "a functional layer_norm call, not a module": "not swapped: a functional call",
    _SWAP + "its module has forward hooks": "not swapped: forward hooks",
    _SWAP + "its module normalises over several dimensions": "not swapped: several axes",
}
_SHORT_PATTERNS = (
    (re.compile(r"^the (?P<kind>[\w ]+?) that writes its input cannot be centred"), "its {kind} cannot be centred"),
    (re.compile(r"^" + _SWAP + r"its module is an? (?P<cls>\w+), not nn\.LayerNorm$"), "not swapped: a {cls}"),
)


def short_reason(kind: str) -> str:
    """A refusal kind (:func:`refusal_kind`) in a few words, for a table cell: ``"a gain before it"``. A kind this
    table does not know is returned whole (never cut or guessed).

    >>> short_reason("the embedding that writes its input cannot be centred: its output is also an output of the model")
    'its embedding cannot be centred'
    """
    if not isinstance(kind, str):
        raise TypeError(f"a refusal kind is a string (from refusal_kind), got {kind!r}")
    if kind in _SHORT:
        return _SHORT[kind]
    for pattern, words in _SHORT_PATTERNS:
        match = pattern.search(kind)
        if match is not None:
            return words.format(**match.groupdict())
    return kind


def refusal_kind(reason: str) -> str:
    """What a refusal's ``reason`` means, without the operation and module it names; a reason of no known kind is
    returned whole. A swap refusal is written ``"foldable, not swapped: " + verdict.swap``.

    >>> refusal_kind("the model input 'src' is not zero-mean by construction")
    'it reads the model input, which is not zero-mean'
    """
    if not isinstance(reason, str):
        raise TypeError(f"a refusal's reason is a string (LayerNormVerdict.reason), got {reason!r}")
    reason = reason.strip()
    for pattern, words in _KINDS:
        match = pattern.search(reason)
        if match is None:
            continue
        if words is not None:
            return words
        if "cls" in pattern.groupindex:
            return _SWAP + f"its module is a {match['cls']}, not nn.LayerNorm"
        why = next((w for p, w in _WRITER_REASONS if p.search(match["why"])), None)
        return f"the {match['kind']} that writes its input cannot be centred" + (f": {why}" if why else "")
    return reason


@dataclass(frozen=True)
class RefusalSummary:
    """The refusals of one model: ``kinds`` maps what a refusal means (:func:`refusal_kind`) to how many LayerNorms
    have it, most frequent first; ``messages`` maps each full message to its count, as given."""

    kinds: dict[str, int]
    messages: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def cell(self) -> str:
        """One table cell: ``"3 LayerNorms: ...; 1 LayerNorm: ..."``, every kind once and whole; ``""`` when none."""
        return "; ".join(f"{n} LayerNorm{'' if n == 1 else 's'}: {kind}" for kind, n in self.kinds.items())

    def short_cell(self) -> str:
        """One short table cell: each kind in a few words (:func:`short_reason`), with its count when several
        LayerNorms share it: ``"a gain before it (3); its embedding cannot be centred"``; ``""`` when none. The
        kinds and full messages (:meth:`cell`, :attr:`messages`) belong in a list below the table."""
        return "; ".join(short_reason(kind) + (f" ({n})" if n > 1 else "") for kind, n in self.kinds.items())

    def table_cell(self) -> Details | None:
        """:meth:`cell` with every full message folded under it (a :class:`lnbook.util.tables.Details`: a closed
        ``<details>`` on the page), ``"(3x) "`` before a message that several LayerNorms share; ``None`` (shown as
        ``-``) when nothing was refused."""
        if not self.messages:
            return None
        return Details(self.cell(), [(f"({n}x) " if n > 1 else "") + m for m, n in self.messages.items()])

    def __str__(self) -> str:
        return self.cell()


def summarise_refusals(reasons: Mapping[str, int] | Iterable[str]) -> RefusalSummary:
    """Count the kinds of ``reasons`` (each a verdict's reason, or a mapping reason -> count as
    :func:`lnbook.folding.real_models.real_model_row` returns), most frequent first (ties in the order given).

    >>> s = summarise_refusals(["the output of aten.layer_norm.default at a.LayerNorm has a per-feature gain, so its "
    ...                         "mean varies with the input", "the model input 'x' is not zero-mean by construction"])
    >>> s.cell()
    '1 LayerNorm: the LayerNorm before it has a per-feature gain, so the mean of its input varies with the input; 1 LayerNorm: it reads the model input, which is not zero-mean'
    """
    if isinstance(reasons, str):
        raise TypeError("give a list of refusal reasons (or a mapping reason -> count), not one string")
    if isinstance(reasons, Mapping):
        items = list(reasons.items())
    else:
        items = list(Counter(reasons).items())
    messages: dict[str, int] = {}
    for reason, count in items:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"the count of a refusal must be a whole number >= 1, got {count!r} for {reason!r}")
        refusal_kind(reason)  # refuses a reason that is not a string
        messages[reason] = messages.get(reason, 0) + count
    kinds: Counter = Counter()
    order: dict[str, int] = {}
    for reason, count in messages.items():
        kind = refusal_kind(reason)
        kinds[kind] += count
        order.setdefault(kind, len(order))
    ranked = sorted(kinds, key=lambda k: (-kinds[k], order[k]))
    return RefusalSummary({k: kinds[k] for k in ranked}, messages)


_NUMBER = re.compile(r"(?<=\.)\d+(?=\.|$)")


def _ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def name_ranges(names: Iterable[str]) -> list[str]:
    """Module names with one numbered segment, written once per pattern with the numbers as a range:
    ``encoder.layer.0.output.LayerNorm`` ... ``encoder.layer.5.output.LayerNorm`` -> ``encoder.layer.{0-5}.output.LayerNorm``.
    A name with several numbered segments is grouped by its first (``blocks.0.mlp.2``, ``blocks.1.mlp.2`` ->
    ``blocks.{0-1}.mlp.2``, the others kept as they are); a name with no numbered segment, or alone in its pattern,
    stays as it is; the order is that of each pattern's first name.

    >>> name_ranges(["emb.LayerNorm", "h.0.ln_1", "h.1.ln_1", "h.3.ln_1", "h.0.ln_2"])
    ['emb.LayerNorm', 'h.{0-1,3}.ln_1', 'h.0.ln_2']
    """
    if isinstance(names, str):
        raise TypeError("give a list of module names, not one string")
    groups: dict[str, list[str]] = {}
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"a module name is a string, got {name!r}")
        groups.setdefault(_NUMBER.sub("{}", name, count=1), []).append(name)
    return [members[0] if len(members) == 1 or "{}" not in pattern
            else pattern.replace("{}", "{" + _ranges([int(_NUMBER.findall(m)[0]) for m in members]) + "}")
            for pattern, members in groups.items()]


def module_ranges(names: Iterable[str]) -> list[str]:
    """:func:`name_ranges` as a reader reads them: a numbered pattern ``blocks.{0-1}.attn.out`` is written
    ``attn.out in blocks 0–1`` (what repeats, then where and which numbers, with en dashes for runs), a pattern
    with the number last ``blocks.{9-11}`` as ``blocks 9–11``; every other name stays as it is.

    >>> module_ranges(["emb.LayerNorm", "h.0.ln_1", "h.1.ln_1", "h.3.ln_1", "blocks.9", "blocks.10"])
    ['emb.LayerNorm', 'ln_1 in h 0–1, 3', 'blocks 9–10']
    """
    out = []
    for text in name_ranges(names):
        match = re.fullmatch(r"(.+)\.\{([0-9,\-]+)\}(?:\.(.+))?", text)
        if match is None:
            out.append(text)
            continue
        where = f"{match[1]} " + match[2].replace("-", "\N{EN DASH}").replace(",", ", ")
        out.append(f"{match[3]} in {where}" if match[3] else where)
    return out


FOLDABLE_WHY = "its input has zero mean once its writers are centred"  # the why of a foldable LayerNorm (the definition)


def verdict_groups(verdicts) -> Table:
    """A fold report's verdicts (the ``layer_norms`` of a :class:`lnbook.folding.fold.FoldReport`) in a few rows: one row per verdict
    ("foldable", "foldable, not swapped", "refused") and what the refusal means (:func:`refusal_kind`), with the
    LayerNorms' names written once (:func:`name_ranges`), how many they are, and the reason once; the order is that
    of each group's first LayerNorm. Every LayerNorm is in exactly one row (the counts add up to the report's). When
    every LayerNorm is foldable and swapped the ``why`` column would say only :data:`FOLDABLE_WHY`: it is left out;
    otherwise a foldable, swapped row says :data:`FOLDABLE_WHY` (no blank cell)."""
    verdicts = list(verdicts)
    if not verdicts:
        raise ValueError("the report has no LayerNorm: there is nothing to group (did the trace find the model's norms?)")
    groups: dict[tuple[str, str], list[str]] = {}
    for v in verdicts:
        if v.foldable:
            verdict, why = ("foldable, not swapped", refusal_kind(_SWAP + v.swap)[len(_SWAP):]) if v.swap else ("foldable", "")
        else:
            verdict, why = "refused", refusal_kind(v.reason)
        groups.setdefault((verdict, why), []).append(v.name)
    columns = ["LayerNorms", "how many", "verdict", "why"]
    if not any(why for _, why in groups):
        return Table([[Lines(module_ranges(names)), len(names), verdict] for (verdict, _), names in groups.items()],
                     columns[:3])
    return Table([[Lines(module_ranges(names)), len(names), verdict, why or FOLDABLE_WHY]
                  for (verdict, why), names in groups.items()], columns)
