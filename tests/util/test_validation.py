"""Tests of :mod:`lnbook.util.validation`: the value-check helper ``holds`` and ``as_float_tensor``'s options
(allowed dtypes, and when the finiteness check runs)."""

from __future__ import annotations

import pytest
import torch

from lnbook.util.validation import as_float_tensor, check_eps, holds


def test_holds_is_bool_in_eager_mode_and_under_grad_and_names_check_false_under_vmap():
    assert holds(torch.tensor(True)) is True and holds(torch.tensor([1.0, 2.0]).gt(0).all()) is True
    assert holds(torch.tensor(False)) is False
    # under grad the value is available: the check runs
    seen = []
    torch.func.grad(lambda x: (seen.append(holds((x > 0).all())), (x ** 2).sum())[1])(torch.ones(3))
    assert seen == [True]
    with pytest.raises(RuntimeError, match="check=False"):
        torch.func.vmap(lambda x: x * holds((x > 0).all()))(torch.ones(2, 3))


def test_as_float_tensor_restricts_dtypes_when_asked_and_says_why():
    x = torch.zeros(2, 3, dtype=torch.float16)
    assert as_float_tensor(x, "x", 2) is x  # any float by default
    with pytest.raises(TypeError, match=r"only float32 or float64 is accepted here \(too few digits\).*x\.float\(\)"):
        as_float_tensor(x, "x", 2, dtypes=(torch.float32, torch.float64), why="too few digits")
    y = torch.zeros(2, 3)
    assert as_float_tensor(y, "y", 2, dtypes=(torch.float32, torch.float64)) is y
    with pytest.raises(TypeError, match="torch.Tensor"):
        as_float_tensor([1.0], "z")
    with pytest.raises(ValueError, match="at least 3 dimension"):
        as_float_tensor(y, "y", 3)


def test_as_float_tensor_finiteness_check_default_always_or_never():
    bad = torch.tensor([[1.0, float("nan")]])
    for check in (None, True):
        with pytest.raises(ValueError, match="1 non-finite value"):
            as_float_tensor(bad, "x", check=check)
    assert as_float_tensor(bad, "x", check=False) is bad
    stacked = torch.stack([bad, bad])
    # default: skipped under vmap (values unknown); True: the error says to pass check=False; False: pure tensor code
    assert torch.func.vmap(lambda z: as_float_tensor(z, "z", check=None) * 1)(stacked).isnan().any()
    with pytest.raises(RuntimeError, match="check=False"):
        torch.func.vmap(lambda z: as_float_tensor(z, "z", check=True) * 1)(stacked)
    assert torch.func.vmap(lambda z: as_float_tensor(z, "z", check=False) * 1)(stacked).shape == (2, 1, 2)
    # check=True runs under grad too (the default skips it there)
    with pytest.raises(ValueError, match="non-finite"):
        torch.func.grad(lambda z: as_float_tensor(z * bad.sum(), "z", check=True).sum())(torch.ones(2))
    torch.func.grad(lambda z: as_float_tensor(z * bad.sum(), "z").sum())(torch.ones(2))


def test_check_eps():
    assert check_eps(0) == 0.0 and check_eps(1e-5) == 1e-5
    with pytest.raises(ValueError, match=">= 0"):
        check_eps(-1.0)
    with pytest.raises(TypeError, match="real number"):
        check_eps("0.1")


def test_another_threads_export_does_not_switch_off_this_threads_value_checks():
    """``torch.export`` (non-strict) sets torch's process-wide ``is_compiling`` flag while it traces; the value checks
    used to skip themselves on that flag alone, so while another thread exported, a NaN input passed this thread's
    finiteness check silently. They now ask whether the tensor itself is traced (``traced_here``)."""
    from lnbook.util.validation import traced_here, under_transform
    from tests.util.export_in_progress import export_in_another_thread

    x = torch.tensor([1.0, float("nan")])
    with export_in_another_thread():
        assert not traced_here(x) and not under_transform(x)
        with pytest.raises(ValueError, match="finite"):
            as_float_tensor(x, "x", 1)
