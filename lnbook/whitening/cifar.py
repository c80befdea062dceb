r"""The official CIFAR setting of INTL (paper scale), on CIFAR files the reader provides.

:data:`OFFICIAL_CIFAR` lists the values of winci-ai/INTL's ``cifar/cfg.py`` and ``scripts/cifar10.sh`` (as
read in the book's research note); the images come from :func:`lnbook.ml.data.cifar_images` (python pickles
of CIFAR-10 or CIFAR-100 in a local folder, never downloaded); :func:`augment_cifar` is the code's view
pipeline written in batched torch; :func:`resnet18_cifar` is a ResNet-18 with the CIFAR stem;
:func:`linear_probe` is the code's offline probe, trained by :func:`lnbook.ml.training.train`. :func:`run_cifar`
trains (with :func:`lnbook.ml.training.train_views`, through :func:`lnbook.whitening.ssl.train_ssl`) and
evaluates; it is meant for a GPU (1000 epochs at batch 256).

Normalisation, value by value as in the official code (winci-ai/INTL at ``0aa69af``): the training views
(``cifar/transform.py``, ``CifarTransform``) normalise with the data set's own mean and standard deviation,
:data:`TRAIN_NORMALISATION` (CIFAR-100 its own); the evaluation loader (``cifar/eval/dataloader.py``, used for
the probe and the k-NN) normalises both data sets with the rounded CIFAR-10 values, :data:`EVAL_NORMALISATION`.

Differences from the official pipeline, stated once: the augmentations are our batched torch versions of the
torchvision transforms (the colour-jitter order is fixed instead of random, the hue shift is done in HSV as
torchvision does but on the whole batch), one process instead of distributed training, and no SyncBN.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import nn

from lnbook.ml.data import cifar_images
from lnbook.ml.training import evaluate, train
from lnbook.util.device import resolve_device
from lnbook.whitening.ssl import features, knn_accuracy, train_ssl

__all__ = ["OFFICIAL_CIFAR", "README_RESULTS", "TRAIN_NORMALISATION", "EVAL_NORMALISATION", "augment_cifar",
           "resnet18_cifar", "official_projector", "linear_probe", "augment_plain", "run_cifar"]

OFFICIAL_CIFAR = dict(
    arch="resnet18", batch=256, epochs=1000, lr=0.3, momentum=0.9, weight_decay=1e-4, warmup_epochs=2,
    final_lr_ratio=0.001, projection_layers=3, projection_size=2048, emb=2048, axis=0, T=4,
    crop_size=32, crop_scale=(0.08, 1.0), jitter=(0.4, 0.4, 0.2, 0.1), jitter_p=0.8, grayscale_p=0.2,
    solarize_p=(0.0, 0.2), flip_p=0.5, knn_k=5, probe_epochs=500, probe_batch=1000, probe_lr=(1e-2, 1e-6),
    probe_weight_decay=5e-6,
)
# (mean, std) per channel of the training views: cifar/transform.py, CifarTransform, each data set its own
TRAIN_NORMALISATION = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}
# (mean, std) of the evaluation loader, cifar/eval/dataloader.py: the rounded CIFAR-10 values for both data sets
EVAL_NORMALISATION = ((0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261))
# the README of winci-ai/INTL (top-1 of the linear probe, 5-NN), in percent
README_RESULTS = {"cifar10": {"top1": 92.60, "knn5": 90.03}, "cifar100": {"top1": 70.88, "knn5": 61.90}}
def _rgb_to_hsv(x):
    r, g, b = x.unbind(1)
    maxc, minc = x.max(1).values, x.min(1).values
    delta = maxc - minc
    s = delta / maxc.clamp_min(1e-12)
    d = delta.clamp_min(1e-12)
    h = torch.where(maxc == r, (g - b) / d, torch.where(maxc == g, 2 + (b - r) / d, 4 + (r - g) / d))
    h = torch.where(delta > 0, (h / 6) % 1.0, torch.zeros_like(h))
    return h, s, maxc


def _hsv_to_rgb(h, s, v):
    i = torch.floor(h * 6)
    f = h * 6 - i
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    i = i.long() % 6
    choices = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = [sum(torch.where(i == k, c[ch], torch.zeros_like(v)) for k, c in enumerate(choices)) for ch in range(3)]
    return torch.stack(out, 1)


def augment_cifar(x: torch.Tensor, generator: torch.Generator, view: int = 0, dataset: str = "cifar10") -> torch.Tensor:
    """One augmented, normalised view of uint8 images ``x`` (n, 3, 32, 32) of ``dataset``, on ``x``'s device.

    Random resized crop (scale 0.08-1, ratio 3/4-4/3, bicubic), colour jitter (0.4, 0.4, 0.2, 0.1) with
    probability 0.8, grayscale 0.2, solarisation with probability 0 (view 0) or 0.2 (view 1), flip 0.5, then the
    data set's own normalisation (:data:`TRAIN_NORMALISATION`, as the official training views).
    Random numbers come from the CPU ``generator``.
    """
    if dataset not in TRAIN_NORMALISATION:
        raise ValueError(f"dataset must be 'cifar10' or 'cifar100', got {dataset!r}")
    train_mean, train_std = TRAIN_NORMALISATION[dataset]
    cfg, n, dev = OFFICIAL_CIFAR, x.shape[0], x.device
    rand = lambda *s: torch.rand(*s, generator=generator).to(dev)  # noqa: E731
    img = x.float() / 255
    area = rand(n) * (cfg["crop_scale"][1] - cfg["crop_scale"][0]) + cfg["crop_scale"][0]
    ratio = torch.exp(rand(n) * (math.log(4 / 3) - math.log(3 / 4)) + math.log(3 / 4))
    w = torch.sqrt(area * ratio).clamp(max=1.0)
    h = torch.sqrt(area / ratio).clamp(max=1.0)
    cx, cy = (rand(n) * 2 - 1) * (1 - w), (rand(n) * 2 - 1) * (1 - h)
    flip = torch.where(rand(n) < cfg["flip_p"], -1.0, 1.0)
    theta = torch.zeros(n, 2, 3, device=dev)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = w * flip, cx, h, cy
    grid = nn.functional.affine_grid(theta, (n, 3, 32, 32), align_corners=False)
    img = nn.functional.grid_sample(img, grid, mode="bicubic", padding_mode="border", align_corners=False).clamp(0, 1)
    b, c, s, hue = cfg["jitter"]
    jit = (rand(n) < cfg["jitter_p"]).view(n, 1, 1, 1)
    f = lambda a: (1 - a + 2 * a * rand(n)).view(n, 1, 1, 1)  # noqa: E731
    gray = lambda im: (0.299 * im[:, :1] + 0.587 * im[:, 1:2] + 0.114 * im[:, 2:3])  # noqa: E731
    out = (img * f(b)).clamp(0, 1)
    out = ((out - gray(out).mean((2, 3), keepdim=True)) * f(c) + gray(out).mean((2, 3), keepdim=True)).clamp(0, 1)
    out = ((out - gray(out)) * f(s) + gray(out)).clamp(0, 1)
    hh, ss, vv = _rgb_to_hsv(out)
    out = _hsv_to_rgb((hh + ((rand(n) * 2 - 1) * hue).view(n, 1, 1)) % 1.0, ss, vv)
    img = torch.where(jit, out, img)
    img = torch.where((rand(n) < cfg["grayscale_p"]).view(n, 1, 1, 1), gray(img).expand_as(img), img)
    img = torch.where((rand(n) < cfg["solarize_p"][min(view, 1)]).view(n, 1, 1, 1) & (img >= 0.5), 1 - img, img)
    mean = torch.tensor(train_mean, device=dev).view(1, 3, 1, 1)
    std = torch.tensor(train_std, device=dev).view(1, 3, 1, 1)
    return (img - mean) / std


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                  nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.skip = (nn.Sequential() if stride == 1 and cin == cout else
                     nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


def resnet18_cifar() -> nn.Module:
    """ResNet-18 with the CIFAR stem (3x3 conv, stride 1, no max-pool); outputs the 512-d pooled features."""
    layers, cin = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()], 64
    for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        layers += [_Block(cin, cout, stride), _Block(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())


def official_projector(in_dim: int = 512, size: int = 2048, emb: int = 2048, layers: int = 3) -> nn.Module:
    """``layers`` x [Linear (no bias) -> BatchNorm1d -> ReLU], then Linear(size, emb), as in the code."""
    mods, d = [], in_dim
    for _ in range(layers):
        mods += [nn.Linear(d, size, bias=False), nn.BatchNorm1d(size), nn.ReLU()]
        d = size
    return nn.Sequential(*mods, nn.Linear(d, emb))


def linear_probe(Ftr, ytr, Fte, yte, epochs: int = 500, batch: int = 1000, device=None, seed: int = 0) -> float:
    """The code's offline probe: a linear layer, Adam lr 1e-2 decayed exponentially to 1e-6, wd 5e-6; top-1.

    Trained by :func:`lnbook.ml.training.train` (mini-batches of ``batch`` reshuffled every epoch with ``seed``,
    the learning rate multiplied by ``gamma ** epoch``), evaluated by :func:`lnbook.ml.training.evaluate`."""
    lr0, lr1 = OFFICIAL_CIFAR["probe_lr"]
    gamma = (lr1 / lr0) ** (1 / max(1, epochs))
    clf = nn.Linear(Ftr.shape[1], int(ytr.max()) + 1)
    train(clf, Ftr, ytr, epochs=epochs, batch_size=batch, optimizer="adam", lr=lr0,
          weight_decay=OFFICIAL_CIFAR["probe_weight_decay"], lr_schedule=lambda epoch: gamma ** epoch, seed=seed,
          device=resolve_device(device), stop_at_fit=False, fit="last", progress=False, report=False,
          label="linear probe")
    return evaluate(clf, Fte, yte)[1]


# keys of OFFICIAL_CIFAR that run_cifar does not pass on (augment_cifar, the schedule and linear_probe read their
# official values): overriding one would be silently ignored, so run_cifar refuses it (referee ch8)
FIXED_CIFAR_SETTINGS = frozenset({"arch", "crop_scale", "crop_size", "final_lr_ratio", "flip_p", "grayscale_p",
                                  "jitter", "jitter_p", "probe_lr", "probe_weight_decay", "solarize_p"})


def run_cifar(folder, name: str = "cifar10", epochs: int | None = None, device=None, seed: int = 0,
              progress: bool = True, **overrides) -> dict:
    """Train INTL on CIFAR with the official setting and evaluate the frozen backbone: 5-NN (Euclidean) and
    the linear probe. Returns top-1 and 5-NN accuracy in percent and the epochs run. ``epochs`` and
    ``overrides`` (keys of :data:`OFFICIAL_CIFAR`, e.g. ``batch``, ``probe_epochs``) change the setting: the
    README's numbers are comparable only at the official values. The keys of :data:`FIXED_CIFAR_SETTINGS` (the
    views, the final learning-rate ratio, the probe's optimiser) are used at their official values only and are
    refused as overrides."""
    unknown = set(overrides) - set(OFFICIAL_CIFAR)
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}; use keys of OFFICIAL_CIFAR")
    fixed = sorted(set(overrides) & FIXED_CIFAR_SETTINGS)
    if fixed:
        raise ValueError(f"the settings {fixed} are read at their official values by the augmentation, the schedule or "
                         f"the probe, not by run_cifar: an override would be ignored; overridable: "
                         f"{sorted(set(OFFICIAL_CIFAR) - FIXED_CIFAR_SETTINGS)}")
    cfg = {**OFFICIAL_CIFAR, **overrides}
    if name not in TRAIN_NORMALISATION:
        raise ValueError(f"name must be 'cifar10' or 'cifar100', got {name!r}")
    Xtr, ytr = cifar_images(folder, name, True)
    Xte, yte = cifar_images(folder, name, False)
    device = resolve_device(device)
    run = train_ssl(Xtr.to(device), "intl", cfg["T"], cfg["axis"], seed, batch=cfg["batch"],
                    epochs=epochs or cfg["epochs"], lr=cfg["lr"] * cfg["batch"] / 256, momentum=cfg["momentum"],
                    weight_decay=cfg["weight_decay"], warmup_epochs=cfg["warmup_epochs"],
                    encoder=resnet18_cifar(), head=official_projector(512, cfg["projection_size"], cfg["emb"],
                                                                       cfg["projection_layers"]),
                    augment=functools.partial(augment_cifar, dataset=name), device=device, progress=progress, probe=Xtr[:1].to(device))
    backbone = nn.Sequential(_Plain(), run.encoder)
    Ftr, Fte = features(backbone, Xtr, batch=1000), features(backbone, Xte, batch=1000)
    return dict(top1=100 * linear_probe(Ftr, ytr, Fte, yte, cfg["probe_epochs"], cfg["probe_batch"], device),
                knn5=100 * knn_accuracy(Ftr, ytr, Fte, yte, min(cfg["knn_k"], len(Ftr)), metric="euclidean", device=device),
                epochs=epochs or cfg["epochs"])


def augment_plain(x: torch.Tensor) -> torch.Tensor:
    """No augmentation: uint8 images to normalised floats, as the official evaluation loader does for CIFAR-10
    and CIFAR-100 alike (:data:`EVAL_NORMALISATION`)."""
    mean = torch.tensor(EVAL_NORMALISATION[0], device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(EVAL_NORMALISATION[1], device=x.device).view(1, 3, 1, 1)
    return (x.float() / 255 - mean) / std


class _Plain(nn.Module):
    """Evaluation input: uint8 images to normalised floats (no augmentation)."""

    def forward(self, x):
        return augment_plain(x)
