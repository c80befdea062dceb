"""Shared test set-up: the one hypothesis profile of the book.

The profile ``lnbook`` is registered and loaded here, once: no deadline (CI machines are shared and
slow), and ``derandomize=True`` so that the same command runs the same examples (the book's rule:
the same command prints the same numbers). Tests set only ``max_examples`` where they need another
number than hypothesis' default. The strategies the test files share live in ``tests/strategies.py``.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("lnbook", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("lnbook")
