"""lnbook.util.scale (the ci/paper switch) and lnbook.util.device (CUDA when present, seeding).
"""

from __future__ import annotations

import torch

from lnbook.util.device import describe_run, get_device, seed_everything


def test_device_follows_cuda_availability(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert get_device().type == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert get_device().type == "cuda"


def test_seeding_is_deterministic():
    g1 = seed_everything(123)
    a = torch.randn(5), torch.randn(3, generator=g1)
    g2 = seed_everything(123)
    b = torch.randn(5), torch.randn(3, generator=g2)
    assert all(torch.equal(u, v) for u, v in zip(a, b))


def test_describe_run_names_scale_and_device(monkeypatch):
    monkeypatch.setenv("LNBOOK_SCALE", "ci")
    line = describe_run()
    assert "scale=ci" in line and f"device={get_device().type}" in line and torch.__version__ in line


def test_tf32_is_what_the_block_says_inside_and_restored_after():
    from lnbook.util.device import tf32, tf32_enabled

    before = tf32_enabled()
    with tf32(False):
        assert tf32_enabled() == (False, False)
        with tf32(True):
            assert tf32_enabled() == (True, True)
        assert tf32_enabled() == (False, False)
    assert tf32_enabled() == before
    try:
        with tf32(True):
            raise KeyError("inside")
    except KeyError:
        pass
    assert tf32_enabled() == before


def test_resolve_device_defaults_to_get_device():
    from lnbook.util.device import resolve_device

    assert resolve_device() == get_device()
    assert resolve_device("meta") == torch.device("meta")


def test_tf32_keeps_torchs_flags_readable_and_honours_the_new_api():
    """Setting TF32 through torch's new per-backend API makes torch's own later reads of the legacy flags raise
    (torch.export read them inside a fold: issue 29), so the block sets the legacy flags; when the caller had used the
    new API, it is restored as it was."""
    from lnbook.util.device import _legacy, _set_legacy, tf32, tf32_enabled

    before = _legacy()
    assert before is not None
    with tf32(False):
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, False)
    assert _legacy() == before
    if not hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        return
    try:
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        assert tf32_enabled()[0]
        with tf32(False):
            assert tf32_enabled() == (False, False)
        assert torch.backends.cuda.matmul.fp32_precision == "tf32" and tf32_enabled()[0]
    finally:
        _set_legacy(*before)
    assert _legacy() == before


def test_without_autocast_computes_in_the_inputs_dtype_and_restores_autocast():
    """Inside ``torch.autocast('cpu', bfloat16)`` a float32 product is bfloat16; a function wrapped in
    ``without_autocast`` computes it in float32 (the exact product of small integers, which bfloat16's 8-bit
    mantissa rounds), and autocast is on again after it returns, also when it raised."""
    from lnbook.util.device import autocast_disabled, without_autocast

    A = torch.arange(1.0, 65.0).reshape(8, 8)  # entries up to 64: row-by-column sums up to ~1.5e4, exact in float32
    exact = (A.double() @ A.double()).float()

    @without_autocast
    def product(X, *, Y=None):
        return X @ (X if Y is None else Y)

    @without_autocast
    def fails(X):
        raise KeyError("inside")

    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (A @ A).dtype == torch.bfloat16 and not torch.equal((A @ A).float(), exact)  # what autocast does
        assert product(A).dtype == torch.float32 and torch.equal(product(A), exact)
        assert torch.equal(product(A, Y=A), exact)  # a keyword tensor counts too
        assert torch.is_autocast_enabled("cpu")
        try:
            fails(A)
        except KeyError:
            pass
        assert torch.is_autocast_enabled("cpu")
        with autocast_disabled(torch.empty(0, device="meta")):  # no autocast on meta: nothing to disable, no error
            assert torch.is_autocast_enabled("cpu")
        with autocast_disabled():  # no tensor: the CPU
            assert not torch.is_autocast_enabled("cpu")
    assert not torch.is_autocast_enabled("cpu")
