"""Chapter 7 helpers: shipped text (lnbook.ml.text), timing (lnbook.util.timing), next-token training, TinyViT.
"""

from __future__ import annotations

import pytest
import torch

from lnbook.ml.text import (
    CharVocabulary,
    next_token_windows,
    paragraphs,
    spread_paragraphs,
    stdlib_docstrings,
)


def test_stdlib_docstrings_are_deterministic_ascii_prose():
    a, b = stdlib_docstrings(), stdlib_docstrings()
    assert a == b and len(a) > 100_000
    assert all(ch == "\n" or 32 <= ord(ch) < 127 for ch in a)
    assert "\n\n\n" not in a
    found = paragraphs(a, 5)
    assert len(found) == 5 and all(120 <= len(p) <= 600 and "\n" not in p for p in found)
    with pytest.raises(ValueError, match="only"):
        paragraphs("too short", 1)


def test_char_vocabulary_and_windows():
    vocab = CharVocabulary.from_text("abracadabra")
    assert vocab.alphabet == "abcdr" and vocab.size == 5
    ids = vocab.encode("abracadabra" * 5)
    assert vocab.decode(ids) == "abracadabra" * 5
    X, y = next_token_windows(ids, 7, 12, seed=3)
    assert X.shape == y.shape == (12, 7) and torch.equal(X[:, 1:], y[:, :-1])
    assert torch.equal(X, next_token_windows(ids, 7, 12, seed=3)[0])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        vocab.encode("xyz")
    with pytest.raises(ValueError, match="distinct"):
        CharVocabulary("aa")
    with pytest.raises(ValueError, match="too few"):
        next_token_windows(ids[:5], 7, 1)
    with pytest.raises(TypeError, match="1-D torch.long"):
        next_token_windows(ids.float(), 3, 1)


def test_spread_paragraphs_take_the_modules_in_turn():
    """The uniform-vector lab's texts (chapter 7, referee 40, finding 2): the first paragraph of each module, then the
    second of each, and so on, each labelled with its module; a module without (more) paragraphs is skipped (bisect's
    docstrings have no paragraph of 120-600 characters)."""
    texts, sources = spread_paragraphs(7, ("collections", "bisect", "itertools"))
    assert sources == ["collections", "itertools"] * 3 + ["collections"]
    own = {m: paragraphs(stdlib_docstrings((m,)), 4) for m in ("collections", "itertools")}
    assert texts == [own[m][k // 2] for k, m in enumerate(sources)]
    all_texts, all_sources = spread_paragraphs(16)
    assert len(set(all_sources)) == 16 and (all_texts, all_sources) == spread_paragraphs(16)
    with pytest.raises(ValueError, match="only"):
        spread_paragraphs(10_000, ("collections",))
