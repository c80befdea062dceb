"""Chapter 7 helpers: shipped text (lnbook.text), timing (lnbook.timing), next-token training, TinyViT."""

from __future__ import annotations

import pytest
import torch

from lnbook.models import TinyTransformer
from lnbook.text import CharVocabulary, next_token_windows, paragraphs, stdlib_docstrings
from lnbook.timing import amdahl_speedup, interleaved_min_times, speedup
from lnbook.training import evaluate, train
from lnbook.vit import TinyViT


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


def test_interleaved_min_times_and_speedup():
    calls = {"a": 0, "b": 0}

    def make(name):
        def fn():
            calls[name] += 1

        return fn

    times = interleaved_min_times({"a": make("a"), "b": make("b")}, repeats=4, inner=3, warmup=1)
    assert calls == {"a": 1 + 4 * (1 + 3), "b": 1 + 4 * (1 + 3)} and all(t >= 0 for t in times.values())
    assert speedup(1.1, 1.0) == pytest.approx(0.1) and speedup(1.0, 2.0) == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="positive"):
        speedup(0.0, 1.0)
    with pytest.raises(ValueError, match="empty"):
        interleaved_min_times({})


def test_amdahl_numbers_of_the_exercise():
    """ex-ch7-amdahl: f = 1% gives 0.34%-0.45%; 12% needs f = 32% (s = 1.5) or 24% (s = 1.8)."""
    assert amdahl_speedup(0.01, 0.5) == pytest.approx(0.00334, abs=5e-5)
    assert amdahl_speedup(0.01, 0.8) == pytest.approx(0.00446, abs=5e-5)
    for s, f in [(1.5, 0.32), (1.8, 0.24)]:
        needed = (1 - 1 / 1.12) / (1 - 1 / s)
        assert needed == pytest.approx(f, abs=0.005) and amdahl_speedup(needed, s - 1) == pytest.approx(0.12)
    assert amdahl_speedup(0.0, 5.0) == 0.0 and amdahl_speedup(1.0, 1.0) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="share"):
        amdahl_speedup(1.5, 0.1)


def test_next_token_training_learns_a_periodic_text():
    ids = torch.arange(5).repeat(40)  # 0 1 2 3 4 0 1 2 ...: the next token is determined
    X, y = next_token_windows(ids, 8, 64, seed=0)
    torch.manual_seed(0)
    model = TinyTransformer(5, 16, 2, 1, max_len=8, norm="rms")
    history = train(model, X, y, epochs=30, task="next_token", batch_size=16, optimizer="adam", lr=1e-2,
                    progress=False, report=False, device="cpu")
    loss, acc = evaluate(model, X, y, "next_token")
    assert history.loss[-1] < history.loss[0] / 3 and acc == 1.0 and history.stopped_early


def test_next_token_training_refuses_bad_input():
    model = TinyTransformer(5, 16, 2, 1, max_len=8)
    X = torch.zeros(4, 8, dtype=torch.long)
    with pytest.raises(TypeError, match="torch.long tensor of token ids"):
        train(model, X.float(), X, epochs=1, task="next_token", progress=False)
    with pytest.raises(ValueError, match="same non-empty shape"):
        train(model, X, X[:, :5], epochs=1, task="next_token", progress=False)
    with pytest.raises(ValueError, match="labels must lie in"):
        train(model, X, X + 7, epochs=1, task="next_token", progress=False)


def test_tiny_vit_shapes_and_errors():
    model = TinyViT(image_size=8, patch_size=4, n_classes=3, d_model=16, n_heads=2, n_layers=1)
    assert model(torch.randn(5, 1, 8, 8)).shape == (5, 3)
    assert model.pos.shape == (1, 5, 16)
    with pytest.raises(ValueError, match="must divide image_size"):
        TinyViT(image_size=8, patch_size=3)
    with pytest.raises(ValueError, match="does not divide d_model"):
        TinyViT(d_model=10, n_heads=4)
    rms = TinyViT(norm="rms", n_layers=1)
    assert sum(isinstance(m, torch.nn.RMSNorm) for m in rms.modules()) == 3
