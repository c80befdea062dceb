r"""Text that ships with Python itself, for the small language models of chapter 7 (no download).

:func:`stdlib_docstrings` concatenates the docstrings of a fixed list of standard-library modules
and of their public functions and classes (about 250 000 characters of English technical prose,
written by the Python developers and distributed with every Python under the PSF License). It is
the same on every machine with the same Python version; the book records the version with its
results. :class:`CharVocabulary` turns it into token ids (one token per character),
:func:`next_token_windows` cuts random windows for next-token training, and :func:`paragraphs` and
:func:`spread_paragraphs` pick paragraphs to feed the pretrained models (the second takes them from the modules in
turn and says which module each comes from, so that a statistic over texts can be clustered by source).

>>> vocab = CharVocabulary.from_text("hello world")
>>> vocab.decode(vocab.encode("hello"))
'hello'
"""

from __future__ import annotations

import importlib
import inspect
import re
import warnings

import torch

from lnbook.util.validation import check_positive_int

__all__ = ["STDLIB_MODULES", "stdlib_docstrings", "paragraphs", "spread_paragraphs", "CharVocabulary", "next_token_windows"]

STDLIB_MODULES = (
    "collections", "itertools", "functools", "json", "re", "string", "textwrap", "heapq", "bisect",
    "fractions", "decimal", "statistics", "random", "difflib", "csv", "argparse", "pathlib", "datetime",
    "calendar", "inspect", "typing", "contextlib", "dataclasses", "enum", "copy", "pprint", "shutil",
    "tempfile", "zipfile", "logging", "urllib.parse", "email.message", "html.parser", "os", "io", "codecs",
    "operator", "math", "unittest", "threading", "subprocess", "socket", "pickle", "ast", "tokenize",
)  # fmt: skip


def _clean(text: str) -> str:
    text = "".join(ch if ch == "\n" or 32 <= ord(ch) < 127 else "?" for ch in text.replace("\t", "    "))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def stdlib_docstrings(modules: tuple[str, ...] = STDLIB_MODULES) -> str:
    """The docstrings of ``modules`` and of their public functions and classes, in a fixed order.

    Characters outside printable ASCII become ``?``; blank-line runs are shortened to one.
    """
    parts = []
    with warnings.catch_warnings():  # reading e.g. typing.re warns that it is deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in modules:
            module = importlib.import_module(name)
            docs = [inspect.getdoc(module) or ""]
            for attr in sorted(vars(module)):
                obj = getattr(module, attr)
                own = getattr(obj, "__module__", None) == module.__name__
                if not attr.startswith("_") and own and (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)):
                    docs.append(inspect.getdoc(obj) or "")
            parts.append("\n\n".join(d for d in docs if d))
    return _clean("\n\n".join(parts))


def _all_paragraphs(text: str, min_chars: int, max_chars: int) -> list[str]:
    """Every blank-line separated block of ``text`` with ``min_chars..max_chars`` characters, lines joined by spaces."""
    blocks = (" ".join(line.strip() for line in block.splitlines()).strip() for block in text.split("\n\n"))
    return [b for b in blocks if min_chars <= len(b) <= max_chars]


def paragraphs(text: str, n: int, min_chars: int = 120, max_chars: int = 600) -> list[str]:
    """The first ``n`` paragraphs of ``text`` (blank-line separated) with ``min_chars..max_chars``
    characters, lines joined by spaces."""
    n = check_positive_int(n, "n")
    found = _all_paragraphs(text, min_chars, max_chars)
    if len(found) < n:
        raise ValueError(f"only {len(found)} paragraphs of {min_chars}..{max_chars} characters in the text, asked for {n}")
    return found[:n]


def spread_paragraphs(n: int, modules: tuple[str, ...] = STDLIB_MODULES, min_chars: int = 120,
                      max_chars: int = 600) -> tuple[list[str], list[str]]:
    """``n`` paragraphs of ``min_chars..max_chars`` characters taken from the docstrings of ``modules`` in turn
    (the first paragraph of each module, then the second of each, and so on; a module with no more is skipped), and
    the module each came from: ``(texts, sources)``. Unlike the first ``n`` paragraphs of one long text, which come
    from a few modules and often from one docstring, the texts spread over as many modules as ``n`` allows.

    >>> texts, sources = spread_paragraphs(3)
    >>> sources
    ['collections', 'itertools', 'functools']
    """
    n = check_positive_int(n, "n")
    pools = {m: _all_paragraphs(stdlib_docstrings((m,)), min_chars, max_chars) for m in modules}
    texts, sources = [], []
    for k in range(max((len(p) for p in pools.values()), default=0)):
        for m, pool in pools.items():
            if k < len(pool):
                texts.append(pool[k])
                sources.append(m)
                if len(texts) == n:
                    return texts, sources
    raise ValueError(f"only {len(texts)} paragraphs of {min_chars}..{max_chars} characters in the docstrings of "
                     f"{len(modules)} modules, asked for {n}")


class CharVocabulary:
    """One token per character of a fixed alphabet (sorted), with ``encode``/``decode``."""

    def __init__(self, alphabet: str):
        if len(set(alphabet)) != len(alphabet) or len(alphabet) < 2:
            raise ValueError("the alphabet must have at least 2 distinct characters, each once")
        self.alphabet = alphabet
        self.index = {ch: i for i, ch in enumerate(alphabet)}

    @classmethod
    def from_text(cls, text: str) -> "CharVocabulary":
        return cls("".join(sorted(set(text))))

    @property
    def size(self) -> int:
        return len(self.alphabet)

    def encode(self, text: str) -> torch.Tensor:
        unknown = sorted(set(text) - set(self.index))
        if unknown:
            raise ValueError(f"characters outside the vocabulary: {unknown[:10]}")
        return torch.tensor([self.index[ch] for ch in text], dtype=torch.long)

    def decode(self, ids) -> str:
        return "".join(self.alphabet[int(i)] for i in ids)


def next_token_windows(ids: torch.Tensor, length: int, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` random windows of ``length`` tokens and the same windows shifted by one: ``(X, y)``."""
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long or ids.dim() != 1:
        raise TypeError("ids must be a 1-D torch.long tensor of token ids")
    length, n = check_positive_int(length, "length"), check_positive_int(n, "n")
    if len(ids) <= length:
        raise ValueError(f"the text has {len(ids)} tokens, too few for windows of {length} (+1)")
    starts = torch.randint(0, len(ids) - length, (n,), generator=torch.Generator().manual_seed(seed))
    offsets = torch.arange(length)
    return ids[starts[:, None] + offsets], ids[starts[:, None] + offsets + 1]
