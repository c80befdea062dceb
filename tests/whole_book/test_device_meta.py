"""Device discipline, run: helpers given a fake "other" device, torch's ``meta`` device (shapes, no data).

A computation on ``meta`` runs every op (shapes and dtypes only) and fails where data is read back
(``float(t)``, ``t.cpu()``): exactly where CUDA would copy to the host. So a helper that moves its inputs
and parameters consistently **reaches the readout** on ``meta``, while one that mixes devices fails
earlier with ``Tensor on device meta is not on the expected device cpu!``, and ``t.numpy()`` on a
device tensor fails as on CUDA (``can't convert meta device type tensor to numpy``). Training loops
read their loss every step, so on ``meta`` they reach the readout after one forward pass, which is
what these tests check.

What neither these tests nor the static check (``test_device_discipline.py``) see: numerical differences on
CUDA (TF32, reduction orders, other kernels), ops that exist or behave differently only on CUDA
(indexing a CPU tensor with a device index works on ``meta`` but not on CUDA), and memory or time.

Also here: the code paths that must not use TF32 (``lnbook/util/device.py``) run with it off.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lnbook.ml.models import mlp
from lnbook.ml.training import evaluate, model_device, predict
from lnbook.util.device import tf32, tf32_enabled

META = torch.device("meta")
READOUT = r"Tensor.item\(\) cannot be called on meta tensors|Cannot copy out of meta tensor"


def reaches_the_readout(fn, *args, **kwargs) -> None:
    """``fn`` runs on ``meta`` up to its first read of data back to the host, and fails only there."""
    with pytest.raises((RuntimeError, NotImplementedError), match=READOUT):
        fn(*args, **kwargs)


def test_evaluate_runs_on_the_models_device_whatever_the_inputs():
    model = mlp(3, 8, 1, 2).to(META)
    X, y = torch.randn(10, 3), torch.randint(0, 2, (10,))
    assert model_device(model) == META
    reaches_the_readout(evaluate, model, X, y)  # old code: "Tensor on device cpu is not on the expected device meta!"
    reaches_the_readout(predict, model, X)


def test_seed_sweep_batched_trains_on_its_device():
    from lnbook.ln_activation.ensemble import seed_sweep_batched
    from lnbook.ln_activation.lab import ln_mlp

    X, y = torch.randn(20, 2), torch.randint(0, 2, (20,))
    reaches_the_readout(seed_sweep_batched, lambda: ln_mlp(2, 2, features=4), X, y, [0, 1], epochs=2, lr=0.01,
                        progress=False, device="meta")


def test_default_device_is_get_device(monkeypatch):
    """With ``get_device`` answering ``meta`` (a machine with an accelerator), the training helpers go there
    by default; the old ``seed_sweep_batched`` ran on the CPU whatever ``get_device`` said."""
    import lnbook.util.device as device_module
    from lnbook.ln_activation.ensemble import seed_sweep_batched
    from lnbook.ln_activation.lab import ln_mlp
    from lnbook.ml.training import train

    monkeypatch.setattr(device_module, "get_device", lambda: META)
    X, y = torch.randn(20, 2), torch.randint(0, 2, (20,))
    reaches_the_readout(seed_sweep_batched, lambda: ln_mlp(2, 2, features=4), X, y, [0], epochs=2, lr=0.01,
                        progress=False)
    reaches_the_readout(train, mlp(2, 4, 1, 2), X, y, epochs=1, progress=False, report=False)


def test_ssl_spectrum_and_features_read_back_through_the_cpu():
    from lnbook.whitening.ssl import _spectrum, features, mlp_encoder

    enc = mlp_encoder(64, 16, 8).to(META)
    reaches_the_readout(_spectrum, enc, torch.randn(32, 64, device=META))  # old code: .numpy() on the device
    reaches_the_readout(features, enc, torch.randn(32, 64))


def test_train_ssl_moves_its_views():
    from lnbook.whitening.ssl import train_ssl

    X = torch.rand(64, 64)
    reaches_the_readout(train_ssl, X, "intl", 4, 0, batch=32, epochs=1, hidden=16, feature_dim=8,
                        projector_dim=16, emb=16, device="meta")


class _Probe(nn.Module):
    """An identity that records the TF32 setting at each forward."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.seen = []

    def forward(self, x):
        self.seen.append(tf32_enabled())
        return self.lin(x)


def test_exact_paths_run_without_tf32():
    from lnbook.folding.fold import relative_output_difference
    from lnbook.isometry.mlp_at_init import simulate

    probe = _Probe()
    seen = []

    def act(t):
        seen.append(tf32_enabled())
        return torch.tanh(t)

    with tf32(True):
        relative_output_difference(probe, probe, torch.randn(3, 4))
        simulate(act, torch.randn(8, 4, dtype=torch.float64), 2, generator=torch.Generator().manual_seed(0))
        assert tf32_enabled() == (True, True)  # restored on the way out
    assert probe.seen and set(probe.seen) == {(False, False)}
    assert seen and set(seen) == {(False, False)}
