"""What the per-call guards of a folded model cost in ordinary inference (chapter 7, issue 30), printed as ratios.

The referee's setting: a GPT-2 (4 layers, width 256, untied head, random weights and LayerNorm gains and biases,
built from a ``transformers`` config: no download), folded by ``fold_layernorms`` on a prompt of 5 tokens, then
greedy ``generate`` at batch 1 (24 new tokens, the key-value cache on) and one forward at batch 1, length 1. Six
candidates: the original, the original again (an A/A control: the timing noise), the folded model as
``fold_layernorms`` returns it (its guards: the check of weights and hooks, the call prover, the training-mode
refusal, the submodule-call guard), and the folded model without any of those Python hooks
(``lnbook.folding.speed.without_shape_guards``, for timing only: it differs from the original only by its norms,
RMSNorm plus a bias add in place of LayerNorm); and the same two for ``affine="fold"`` (the gains and biases moved
into the next linear layers, so that each norm is a bare RMSNorm, without the bias add). Times are medians of interleaved repeats
(``lnbook.folding.speed.interleaved_median_times``) of this thread's CPU time with one thread (``--clock thread``,
the default), so that the load of a shared machine counts less.
Before timing, each candidate's tokens are compared with the original's.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/guard_overhead.py [--repeats 15] [--tokens 24] [--json out.json]

The chapter reads the recorded run ``benchmarks/recorded/guard_overhead_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import warnings

import torch

from lnbook.folding.fold import fold_layernorms
from lnbook.folding.speed import interleaved_median_times, without_shape_guards


def gpt2(seed: int = 0):
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=1000, n_positions=128, tie_word_embeddings=False)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.normal_(1, 0.2)
                module.bias.normal_(0, 0.2)
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--clock", default="thread", choices=["thread", "wall"])
    parser.add_argument("--json", default=None, help="write the medians (seconds) and the setting to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = gpt2()
    prompt = torch.randint(0, 1000, (1, 5), generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folded = fold_layernorms(model, prompt)
        folded_affine = fold_layernorms(model, prompt, affine="fold")
    models = {"original": model, "original again (A/A)": model, "folded (guards)": folded,
              "folded, no guards": without_shape_guards(folded)[0], "affine folded (guards)": folded_affine,
              "affine folded, no guards": without_shape_guards(folded_affine)[0]}

    def generate(m):
        with torch.no_grad():
            return m.generate(prompt, max_new_tokens=args.tokens, do_sample=False, pad_token_id=0)

    def forward(m, x=torch.randint(0, 1000, (1, 1), generator=torch.Generator().manual_seed(2))):
        with torch.no_grad():
            return m(x)

    reference = generate(model)
    for name, m in models.items():
        if not torch.equal(generate(m), reference):
            raise RuntimeError(f"{name}: generate gives other tokens than the original")
    print(f"GPT-2 (4 layers, width 256, untied head), batch 1, one thread, {args.clock} time, medians of "
          f"{args.repeats} interleaved repeats; tokens identical for all candidates")
    result = {"torch": torch.__version__, "model": "GPT-2, 4 layers, width 256, 4 heads, vocabulary 1000, untied head",
              "prompt": 5, "new_tokens": args.tokens, "threads": 1, "clock": args.clock, "repeats": args.repeats,
              "statistic": "median of interleaved repeats, seconds per call", "times": {}}
    for key, what, fn, inner in [("generate", f"generate, {args.tokens} new tokens", generate, 1),
                                 ("forward", "one forward, length 1", forward, 20)]:
        t = interleaved_median_times({n: (lambda m=m: fn(m)) for n, m in models.items()}, repeats=args.repeats,
                                     inner=inner, clock=args.clock)
        result["times"][key] = t
        guarded, free, original = t["folded (guards)"], t["folded, no guards"], t["original"]
        print(f"{what}: original {1e3 * original:.2f} ms (again: {1e3 * t['original again (A/A)']:.2f} ms), folded with "
              f"guards {1e3 * guarded:.2f} ms, without guards {1e3 * free:.2f} ms")
        print(f"  guards / no guards {guarded / free:.3f}; folded with guards / original {guarded / original:.3f}; "
              f"folded without guards / original {free / original:.3f}; A/A {t['original again (A/A)'] / original:.3f}")
        print(f"  affine folded: with guards / original {t['affine folded (guards)'] / original:.3f}; without guards / "
              f"original {t['affine folded, no guards'] / original:.3f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
