"""Chapter 7's records of the structural claims of Guo et al.'s abstract, the ones the chapter checks.

The abstract says that "many LNs in widely used architectures are foldable", "enabling exact inference-time
conversion" (and a speed-up, recorded by :mod:`lnbook.folding.speed_glue`) "without changing model predictions".
:func:`structural_comparisons` gives the keyword arguments of the folding lab's ``compare`` calls for these three
phrases, from what the lab computed: the rows of the real-model table (checked against the chapter's table,
:data:`lnbook.folding.real_models.CHAPTER_TABLE`, whose counts the record quotes), the folded pre-LN Transformer's
output differences in float64 and float32, and the folded ViT's changed test predictions. Each is our
reconstruction (our definition of foldable, our detector and converter), so a match is "consistent
(reconstruction)". The lab ``ch07_folding_lab`` compares them in a loop, so it holds no logic of its own.
Tests: tests/folding/test_abstract_claims.py.
"""

from __future__ import annotations

import math
import numbers

import torch

from lnbook.folding.fold import check_tolerance

# the float64 record's tolerance: the fold check's 2**12 float64 epsilons (9.09e-13) rounded up to a power of ten, which
# the reproduction page writes in its narrow column ("9.09×10⁻¹³" ran 4 px past the cell)
FLOAT64_TOLERANCE = 1e-12
from lnbook.folding.real_models import CHAPTER_TABLE, MODEL_TITLES
from lnbook.util.tables import significant

__all__ = ["ABSTRACT_SENTENCE", "FLOAT64_TOLERANCE", "QUOTE_FOLDABLE", "QUOTE_EXACT", "QUOTE_PREDICTIONS", "PRE_LN_BODIES", "WIDELY_USED",
           "foldable_counts", "structural_comparisons"]

# the sentence of the abstract (arXiv 2605.14521) that the three records quote, word for word
ABSTRACT_SENTENCE = ("Our analysis shows that many LNs in widely used architectures are foldable, enabling exact "
                     "inference-time conversion and end-to-end acceleration of 2% to 12% without changing model "
                     "predictions.")
QUOTE_FOLDABLE = "many LNs in widely used architectures are foldable"
QUOTE_EXACT = "exact inference-time conversion"
QUOTE_PREDICTIONS = "without changing model predictions"

# the rows of the chapter's table that are bodies of widely used pre-LN architectures whose residual stream only
# linear layers (embeddings, projections, the patch convolution) write: our reading of "many ... are foldable" is
# that every LayerNorm of each of them folds
PRE_LN_BODIES = ("gpt2", "opt", "gpt_neox", "falcon", "gptj", "codegen", "biogpt", "vit")
# every row of the table that is a widely used architecture as released (not torch's layers, not Llama with
# LayerNorms swapped in): the record's reason gives each one's count
WIDELY_USED = PRE_LN_BODIES + ("bloom", "clip_vision", "bert", "convnext", "gpt2_lm_head")
_SOURCE = "guo2026foldable"


def _name(model: str) -> str:
    """The model's name as the chapter's table writes it, without its bracket: ``"GPT-2"``, ``"CLIP vision"``."""
    return MODEL_TITLES[model].split(" (")[0]


def foldable_counts(models=WIDELY_USED) -> dict[str, tuple[int, int]]:
    """``{model: (foldable LayerNorm calls, LayerNorm calls)}`` of the chapter's table (``CHAPTER_TABLE``) for
    ``models`` (default: the widely used architectures, :data:`WIDELY_USED`). Raises ``ValueError`` naming a model
    that is not a row of the table.

    >>> foldable_counts(("opt", "bert"))
    {'opt': (5, 5), 'bert': (1, 5)}
    """
    unknown = [m for m in models if m not in CHAPTER_TABLE]
    if unknown:
        raise ValueError(f"{unknown} are not rows of the chapter's table; the rows are {sorted(CHAPTER_TABLE)}")
    return {m: (CHAPTER_TABLE[m][1], CHAPTER_TABLE[m][0]) for m in models}


def _check_rows(real_rows) -> list[str]:
    """The models of the lab's rows, each checked against the chapter's table (the record quotes the table)."""
    if not isinstance(real_rows, (list, tuple)) or not real_rows:
        raise TypeError("real_rows must be the non-empty list that lnbook.folding.real_models.real_model_table returns, "
                        f"got {type(real_rows).__name__}")
    models = []
    for row in real_rows:
        if not isinstance(row, dict) or not {"model", "layer_norms", "foldable", "swapped"} <= set(row):
            raise TypeError("each row must be a dict of real_model_table with 'model', 'layer_norms', 'foldable' and "
                            f"'swapped', got {row!r}")
        model = row["model"]
        if model not in CHAPTER_TABLE:
            raise ValueError(f"{model!r} is not a row of the chapter's table; the rows are {sorted(CHAPTER_TABLE)}")
        computed = (row["layer_norms"], row["foldable"], row["swapped"])
        if computed != CHAPTER_TABLE[model]:
            raise ValueError(f"the lab's row {model!r} gives (calls, foldable, swapped) = {computed}, the chapter's "
                             f"table {CHAPTER_TABLE[model]}: the record would quote a table this run contradicts; "
                             "find out which is right and correct the other (CHAPTER_TABLE and the chapter's table)")
        models.append(model)
    return models


def _fraction(d: dict, key: str, what: str) -> float:
    value = d.get(key) if isinstance(d, dict) else None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what}[{key!r}] must be a finite relative difference >= 0, got {value!r}")
    return float(value)


def _count(d: dict, key: str, what: str) -> int:
    value = d.get(key) if isinstance(d, dict) else None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{what}[{key!r}] must be a count >= 0, got {value!r}")
    return int(value)


def _of(counts: dict[str, tuple[int, int]], models) -> str:
    return ", ".join(f"{_name(m)} {counts[m][0]} of {counts[m][1]}" for m in models)


def structural_comparisons(real_rows, run: dict, vit: dict) -> list[dict]:
    """The keyword arguments of the folding lab's ``compare`` calls for the abstract's structural claims, in order:

    * ``ch07-foldable-layernorms``: "many LNs in widely used architectures are foldable", a yes/no claim; ours is
      yes when every LayerNorm call of each pre-LN body of the chapter's table (:data:`PRE_LN_BODIES`) is foldable,
      and the reason gives the count of every widely used architecture of the table (:data:`WIDELY_USED`);
    * ``ch07-exact-conversion-float64``: "exact inference-time conversion", the folded pre-LN Transformer's largest
      output difference relative to the largest output in float64 (``run["diff64"]``), against 0 within the fold
      check's tolerance, :func:`lnbook.folding.fold.check_tolerance` of float64 (``2**12`` machine epsilons), rounded up to
      :data:`FLOAT64_TOLERANCE`;
    * ``ch07-exact-conversion-float32``: the same in float32, the largest of the folded Transformer's two differences
      (gain and bias kept, ``run["diff32"]``; moved into the next layers, ``run["diff32_affine"]``) and the folded
      ViT's (``vit["difference"]``), within ``check_tolerance(torch.float32)``; the reason gives the un-centred swap's
      difference (``run["uncentred"]``) as the control;
    * ``ch07-predictions-unchanged``: "without changing model predictions", the number of the ViT's test predictions
      that the fold changes (``vit["changed"]`` of ``vit["n_test"]``), against 0 exactly.

    ``real_rows``: the rows the lab computed with :func:`lnbook.folding.real_models.real_model_table`; each must equal
    its row of the chapter's table, which the record quotes (``ValueError`` naming the row otherwise). ``run``: the
    dict of :func:`lnbook.folding.lab.book_transformer_fold`; ``vit``: that of :func:`lnbook.folding.lab.vit_on_digits`.
    A missing or malformed entry raises ``ValueError`` (``TypeError`` for rows that are not the table's).
    """
    computed = _check_rows(real_rows)
    diff64 = _fraction(run, "diff64", "run")
    diff32 = max(_fraction(run, "diff32", "run"), _fraction(run, "diff32_affine", "run"))
    uncentred = _fraction(run, "uncentred", "run")
    vit_diff = _fraction(vit, "difference", "vit")
    changed, n_test = _count(vit, "changed", "vit"), _count(vit, "n_test", "vit")
    if n_test == 0 or changed > n_test:
        raise ValueError(f"vit must hold 0 <= changed <= n_test with n_test > 0, got changed={changed}, n_test={n_test}")

    counts = foldable_counts(WIDELY_USED)
    bodies_fold = all(counts[m][0] == counts[m][1] for m in PRE_LN_BODIES)
    in_bodies = sum(counts[m][1] for m in PRE_LN_BODIES)
    folded_bodies = sum(counts[m][0] for m in PRE_LN_BODIES)
    others = [m for m in WIDELY_USED if m not in PRE_LN_BODIES]
    tol32 = check_tolerance(torch.float32)
    if not check_tolerance(torch.float64) <= FLOAT64_TOLERANCE:
        raise ValueError("the float64 record's tolerance must be at least the fold check's")
    converter = "The theorem and the converter are our reconstruction, not the paper's algorithm"
    return [
        dict(key="ch07-foldable-layernorms",
             claim=f"LayerNorms that fold, in the abstract's words \"{QUOTE_FOLDABLE}\" (the counts of the chapter's "
                   "table of real architectures)",
             source=_SOURCE, paper=True, ours=bodies_fold, reconstruction=True,
             reason=f"our reading of \"many\": every LayerNorm call of each pre-LN body of the table folds "
                    f"({_of(counts, PRE_LN_BODIES)}: {folded_bodies} of {in_bodies}); in the other widely used "
                    f"architectures of the table ({_of(counts, others)}) post-LN blocks, a LayerNorm with a gain writing "
                    "into the stream, depthwise convolutions and a tied head stop the others. The counts are per "
                    "architecture, at the table's depth of 2 layers: they grow with depth (a post-LN BERT folds 1 of its "
                    "2L + 1 calls, a pre-LN body all of them), so no count pooled over architectures is given. They are "
                    f"our detector's (a reconstruction of the paper's definition and "
                    f"algorithm), on tiny randomly initialised models of each architecture, counted in the bodies: as "
                    "language models, GPT-2, OPT, Falcon, BioGPT and BLOOM tie their unembedding to the token embedding "
                    "by default and then fold none of their LayerNorms until it is untied; this run recomputed "
                    f"{len(computed)} of the table's "
                    f"{len(CHAPTER_TABLE)} rows, and the chapter's tests assert every one"),
        dict(key="ch07-exact-conversion-float64",
             claim=f"\"{QUOTE_EXACT}\": the folded pre-LN Transformer against the original in float64, largest output "
                   "difference relative to the largest output",
             source=_SOURCE, paper=0.0, ours=diff64, abs_tol=FLOAT64_TOLERANCE, reconstruction=True,
             reason=f"exact in real arithmetic by the chapter's theorem; the tolerance is the fold check's, $2^{{12}}$ "
                    f"machine epsilons of float64, rounded up to $10^{{-12}}$. {converter}"),
        dict(key="ch07-exact-conversion-float32",
             claim=f"\"{QUOTE_EXACT}\": the folded pre-LN Transformer (gains and biases kept, and moved into the next "
                   "layers) and the folded ViT against their originals in float32, largest relative output difference",
             source=_SOURCE, paper=0.0, ours=max(diff32, vit_diff), abs_tol=tol32, reconstruction=True,
             reason=f"the tolerance is the fold check's in float32, $2^{{12}}$ machine epsilons; as a control, "
                    f"RMSNorm swapped in without centring the writers moves the Transformer's outputs by "
                    f"{significant(uncentred, 2)} of the largest output. {converter}"),
        dict(key="ch07-predictions-unchanged",
             claim=f"\"{QUOTE_PREDICTIONS}\": the test predictions of the ViT trained on digits that the fold changes",
             source=_SOURCE, paper=0, ours=changed, abs_tol=0.0, reconstruction=True,
             reason=f"the folded ViT in float32, gains and biases moved into the next layers, against the original on "
                    f"its {n_test} test images. {converter}"),
    ]
