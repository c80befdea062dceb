"""The book's trainable models, training loop, datasets (made here or shipped by a package) and text corpus.

Chapter: chapters 2, 5, 6, 7.
Tests: tests/ml/.

Modules:

* :mod:`lnbook.ml.data` — The book's datasets: made here or shipped by an installed package, never downloaded;
* :mod:`lnbook.ml.models` — The book's small trainable models, each with a ``norm=`` switch;
* :mod:`lnbook.ml.text` — Text that ships with Python itself, for the small language models of chapter 7 (no download);
* :mod:`lnbook.ml.training` — One training loop for every experiment of the book: :func:`train`;
* :mod:`lnbook.ml.vit` — A small ViT-style image classifier with a ``norm=`` switch (chapter 7's vision example);
"""

from __future__ import annotations

from lnbook.ml.data import (
    CIFAR10_FILES,
    CIFAR100_FILES,
    MNIST_FILES,
    associative_recall,
    cifar10_grayscale,
    cifar_images,
    dataset_folder,
    digits,
    digits_split,
    mnist,
    random_labels,
    sphere_octants,
    spiral,
    with_random_labels,
)
from lnbook.ml.models import (
    ACTIVATIONS,
    NORMS,
    LastPosition,
    TinyTransformer,
    make_norm,
    mlp,
    small_cnn,
)
from lnbook.ml.text import (
    STDLIB_MODULES,
    CharVocabulary,
    next_token_windows,
    paragraphs,
    stdlib_docstrings,
)
from lnbook.ml.training import (
    History,
    TrainingDiverged,
    evaluate,
    predict,
    train,
    train_views,
    warmup_cosine_lr,
)
from lnbook.ml.vit import (
    TinyViT,
    ViTBlock,
)

__all__ = [
    "digits",
    "digits_split",
    "random_labels",
    "with_random_labels",
    "spiral",
    "sphere_octants",
    "associative_recall",
    "MNIST_FILES",
    "CIFAR10_FILES",
    "CIFAR100_FILES",
    "mnist",
    "cifar10_grayscale",
    "cifar_images",
    "dataset_folder",
    "NORMS",
    "ACTIVATIONS",
    "make_norm",
    "mlp",
    "TinyTransformer",
    "small_cnn",
    "LastPosition",
    "STDLIB_MODULES",
    "stdlib_docstrings",
    "paragraphs",
    "CharVocabulary",
    "next_token_windows",
    "History",
    "TrainingDiverged",
    "train",
    "evaluate",
    "predict",
    "ViTBlock",
    "TinyViT",
]
