"""The book's machinery: the pages and experiments of ``_toc.yml``, the notebook runner, the
comparisons with the papers and their table, the index of theorems, the offline assets, the Sphinx
extension for glued images, the browser check of the built site, and ``python -m lnbook``.

Modules (imported one by one; this package re-exports nothing, so that importing one does not pull
in the others):

* :mod:`lnbook.book.toc` — the book's pages, notebooks, chapters and experiments, read from ``_toc.yml``;
* :mod:`lnbook.book.runner` — executes notebooks into the build's cache, keeping their results;
* :mod:`lnbook.book.reproduction` — our numbers beside the papers', with tolerances and verdicts;
* :mod:`lnbook.book.reproduction_table` — the table of every number compared with a paper;
* :mod:`lnbook.book.theorem_index` — the index of the chapters' statements and their machine checks;
* :mod:`lnbook.book.assets` — MathJax and the widget manager, served by the book itself;
* :mod:`lnbook.book.sphinx_glue_images` — a Sphinx extension: a lab's figure as a numbered figure of a chapter
  (``glue:figure`` with ``:doc:``), and the image files of everything glued into chapters;
* :mod:`lnbook.book.sphinx_appendix_numbers` — a Sphinx extension: an appendix numbered by its letter (A.1, A.2);
* :mod:`lnbook.book.sphinx_bibliography` — a Sphinx extension: a bibliography entry's ``code`` field as a link;
* :mod:`lnbook.book.site_check` — every page of the built book, checked in headless Chromium;
* :mod:`lnbook.book.cli` — ``python -m lnbook``: list and run experiments, execute, assets, check-site.

Tests: tests/book/ (and tests/whole_book/ for the book as a whole).
"""
