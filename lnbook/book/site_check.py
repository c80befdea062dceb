"""Open every page of the built HTML book in headless Chromium, offline, and check what a reader sees.

:func:`check_site` serves the site from ``127.0.0.1`` and, on each page, waits for MathJax and the
ipywidgets manager, then finds:

* **math** that did not typeset: a Sphinx math element without MathJax output, a MathJax error, or
  raw ``$``, ``\\(`` or ``\\[`` left in the text (code and program output excepted); a **raw LaTeX command**
  (``\\texttt``, ``\\emph``, ``\\textbf``, ...) in the text outside math and code (a bib entry printed as written);
* **figures** that are missing: an image that did not load; on a chapter page (``book/ch*``,
  ``book/appendix*``: :data:`CHAPTER_PAGES`), an image of the text that is not inside a numbered figure
  (a ``figure`` with Sphinx's caption number), which no text can refer to;
* **interactive figures** that do not move: for every range control outside a widget (matplotlib's
  ``to_jshtml`` player, :func:`lnbook.util.plotting.js_animation`), the picture beside it is shot, the
  control is moved to another frame, and the picture must change;
* **widgets** that did not render: a ``application/vnd.jupyter.widget-view+json`` view with no
  rendered widget before it (the HTML manager puts one there);
* **broken internal links**: a link to a file the site lacks, or to an anchor its page lacks;
* **requests that left localhost** (blocked, and reported), HTTP errors and JavaScript errors;
* **logs in the outputs** (:func:`output_problems`): a warning, traceback, log line, machine path or text
  progress bar in any output, anything on stderr, and, in an output not hidden by a cell tag, a raw dict,
  object repr or printed ``True``; a **progress-bar widget** anywhere;
* **a word broken across lines in a table** (a cell narrower than its longest word, as when one long cell squeezes
  the other columns to a letter per line); a line may end at a space, after a hyphen, an en dash, "/" or ")", or at a
  ``<wbr>``; **punctuation cut off from its inline formula** (a line that starts with the ")" after it); and **text that runs past its table cell** into the next column (a word wider than a fixed-width column);
* **what is wider than the text column** (measured in the page): an output, table, image, display equation,
  inline code (a long path), code block or code cell that reaches beyond the article's column, or a block whose text is
  cut off at its edge (scrolls sideways); a **display equation cut off inside its MathJax box** (the theme makes the
  box the column's width and lets it scroll: the typeset ``mjx-math`` itself is measured); a **button whose content
  overflows it** (a js_animation player's glyphs wider than its button);
* **walls of numbers and internal names in the text**: a paragraph with more than
  :data:`BOLD_NUMBERS_PER_PARAGRAPH` bold numbers (glued values are plain text: ``_static/lnbook.css``), and a record
  key of the reproduction table (``ch04-relu-beta0``, :data:`RECORD_KEY`) anywhere in the text a reader sees (code
  inputs excepted; the reproduction table keeps its keys in tooltips);
* on a **lab page** (``notebooks/``, :data:`LAB_PAGES`): an image that is not a numbered figure (a js_animation
  player too: the lab glues it and pastes it with ``{glue:figure}``), a live widget (it does nothing without a kernel), and a **text table printed** in a visible output
  (:func:`text_table`: show a :class:`lnbook.util.tables.Table`);
* **index pages** (Sphinx's ``genindex``, a domain index such as ``prf-prf``) with no entries, or whose entries show
  raw labels (the entry's text is the anchor it links to);
* with ``toc_root``, **a chapter of** ``_toc.yml`` **missing from the index** (the toc's root page).

A full-page screenshot of each page, scrolled back to its top, goes to ``screenshots`` (default:
``_build/screenshots``).
Pages are checked :func:`browser_jobs` at a time (``LNBOOK_BROWSER_JOBS``), one browser per thread.
Chromium is Debian's (``apt-get install -y chromium``), driven by Playwright; no browser is downloaded.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import queue
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlsplit

__all__ = [
    "CHROMIUM_ENV_VAR",
    "SKIP_ENV_VAR",
    "JOBS_ENV_VAR",
    "browser_jobs",
    "BrowserMissing",
    "chromium_path",
    "browser_status",
    "site_dir",
    "html_pages",
    "PageReport",
    "SiteReport",
    "check_site",
    "output_problems",
    "text_table",
]

CHROMIUM_ENV_VAR = "LNBOOK_CHROMIUM"  # path of another Chromium build to use
SKIP_ENV_VAR = "LNBOOK_SKIP_BROWSER"  # =1 skips the browser tests (never set in CI)
JOBS_ENV_VAR = "LNBOOK_BROWSER_JOBS"  # pages checked at once (default: the CPU count, at most 4)
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
# JavaScript errors of the toolchain that change nothing a reader sees: sphinx-thebe 0.3 writes its
# (unused: thebe is off) configuration script twice into every page of a Jupyter Book 1 build.
HARMLESS_JS_ERRORS = ("Identifier 'THEBE_JS_URL' has already been declared",)
# pages whose images must be numbered figures: the chapters and the appendix (labs and generated pages may
# show unnumbered output)
CHAPTER_PAGES = re.compile(r"^book/(ch\d+|appendix)[^/]*\.html$")
# A paragraph of the text with more bold numbers than this reads as a wall of numbers, not as mathematics: the
# numbers a sentence needs are glued plainly (MyST-NB's bold is turned off in _static/lnbook.css), the rest go into a
# table or a dropdown. The book has none; a wall of glued numbers made bold has many.
BOLD_NUMBERS_PER_PARAGRAPH = 3
# A record key of the reproduction table (lnbook.book.reproduction: `ch04-relu-beta0`) is an internal name: the text
# says what was compared, in words. Code inputs are exempt; the reproduction table too names each row by its claim
# and keeps the key in a tooltip (a title attribute, not text), so no page is exempt.
RECORD_KEY = re.compile(r"\b(?:ch\d\d|app\d*)-[a-z0-9]+(?:-[a-z0-9]+)*\b")
RECORD_KEY_PAGES_EXEMPT: frozenset[str] = frozenset()
# The lab pages: each image a numbered figure with a caption (a js_animation player too), no live widget
# (a widget in the static page shows its build-time state and does nothing when moved: its cell is tagged
# remove-output, beside the precomputed player), no text table printed (a lnbook.util.tables.Table shows it).
LAB_PAGES = re.compile(r"^notebooks/[^/]*\.html$")
MAX_SCREENSHOT_HEIGHT = 16000  # px: longer pages are shot in parts (Chromium's texture limit)
VIEWPORT = {"width": 1280, "height": 900}
# A loaded CI machine can take tens of seconds per page; a page still loading after this long is
# reported as a problem of that page (with the requests still in flight), not as a bare timeout.
PAGE_TIMEOUT_S = 180
# A screenshot has its own limit, not PAGE_TIMEOUT_S (a test sets that to 3 s to see a page that never finishes
# loading reported; shooting that page then took over 3 s on a loaded CI machine and failed the test)
SCREENSHOT_TIMEOUT_S = 180
# Every screenshot of a page: its time limit, and CSS transitions and animations finished first (a shot taken while the
# theme's sidebar slides shows a page no reader sees: _screenshot)
SCREENSHOT_OPTIONS = {"timeout": SCREENSHOT_TIMEOUT_S * 1000, "animations": "disabled"}
QUIET_MS = 500  # no request in flight for this long: the page has finished loading
CONTROL_TRIES = 10  # shots, 200 ms apart, before a moved control's picture counts as unchanged


class BrowserMissing(RuntimeError):
    """No Chromium to run the browser checks with; the message says how to install one."""


def chromium_path() -> str:
    """``$LNBOOK_CHROMIUM``, else Debian's ``/usr/bin/chromium`` (or ``chromium`` on the PATH)."""
    wanted = os.environ.get(CHROMIUM_ENV_VAR)
    candidates = [wanted] if wanted else ["/usr/bin/chromium", shutil.which("chromium") or ""]
    for path in candidates:
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            return path
    where = wanted or "/usr/bin/chromium"
    raise BrowserMissing(
        f"Chromium not found at {where}. The browser test opens the built book in headless Chromium: "
        "install Debian's package with `sudo apt-get install -y chromium` (or point "
        f"{CHROMIUM_ENV_VAR} at a Chromium or Chrome binary). To skip the browser tests on a machine "
        f"without a browser, set {SKIP_ENV_VAR}=1 (CI never does)."
    )


def browser_status() -> str | None:
    """For the tests: ``None`` when the browser checks can run, the reason to skip them when
    ``LNBOOK_SKIP_BROWSER=1``; raises :class:`BrowserMissing` (how to install Chromium) otherwise."""
    if os.environ.get(SKIP_ENV_VAR, "").strip() not in ("", "0"):
        return f"{SKIP_ENV_VAR} is set: the browser checks are skipped"
    chromium_path()
    return None


def site_dir(root: Path, scale: str = "ci") -> Path:
    """The built HTML of the book at ``scale``: ``_build/html`` or ``_paper/_build/html``."""
    return Path(root) / ("_paper/_build/html" if scale == "paper" else "_build/html")


def html_pages(site: Path) -> list[Path]:
    """The site's pages: every ``.html`` outside the folders Sphinx names with a leading ``_``."""
    site = Path(site)
    return sorted(
        p for p in site.rglob("*.html") if not any(part.startswith("_") for part in p.relative_to(site).parts[:-1])
    )


@dataclass
class PageReport:
    page: str  # path relative to the site
    math: int = 0  # typeset math elements
    images: int = 0  # loaded images
    figures: int = 0  # images inside a numbered figure
    animations: int = 0  # static range controls moved (and the picture changed)
    widgets: int = 0  # rendered widget views
    links: int = 0  # internal links checked
    problems: list[str] = field(default_factory=list)
    column_links: list[str] = field(default_factory=list)  # pages linked from the text column (not the sidebar)


@dataclass
class SiteReport:
    pages: list[PageReport]
    outside_requests: list[str]
    screenshots: Path | None

    def problems(self) -> list[str]:
        found = [f"{p.page}: {problem}" for p in self.pages for problem in p.problems]
        return found + [f"request left localhost (blocked): {url}" for url in self.outside_requests]

    @property
    def ok(self) -> bool:
        return not self.problems()

    def total(self, what: str) -> int:
        return sum(getattr(p, what) for p in self.pages)

    def summary(self) -> str:
        head = (
            f"{len(self.pages)} pages: {self.total('math')} math elements typeset, {self.total('images')} images "
            f"({self.total('figures')} in numbered figures), {self.total('animations')} interactive figures moved, "
            f"{self.total('widgets')} widget views rendered, {self.total('links')} internal links checked, "
            f"{len(self.outside_requests)} requests outside localhost"
        )
        if self.screenshots is not None:
            head += f"; screenshots in {self.screenshots}"
        problems = self.problems()
        return head + ("\n" + "\n".join(problems) if problems else "\nno problems")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # no access log on stderr
        pass


@contextmanager
def serve(site: Path):
    """Serve ``site`` on 127.0.0.1 (a free port) in a thread; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


# Runs in the page once MathJax and the widgets are done; returns what the checks need.
_INSPECT = r"""
() => {
  const RECORD_KEY = new RegExp(RECORD_KEY_SOURCE, 'g');
  const skip = 'pre, code, script, style, textarea, mjx-container, .highlight, .output';
  const raw = [];
  const latex = [];  // a LaTeX text command outside math: \texttt{...} of a bib entry printed as it is
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = node.nodeValue;
    const delimiter = /\$|\\\(|\\\[/.test(text);
    const command = /\\(?:texttt|textbf|textit|textsc|textrm|textsf|emph|url|href|cite[tp]?|tt|em|bf|it|sc)\b/.exec(text);
    if (!delimiter && !command) continue;
    if (node.parentElement && node.parentElement.closest(skip)) continue;
    if (delimiter) raw.push(text.trim().slice(0, 80));
    if (command) {
      const at = Math.max(0, command.index - 30);
      latex.push(text.slice(at, command.index + 50).trim().replace(/\s+/g, ' '));
    }
  }
  const maths = Array.from(document.querySelectorAll('.math'))
    .filter(e => !e.parentElement.closest('.math'));
  const untypeset = maths.filter(e => !e.querySelector('mjx-container'))
    .map(e => e.textContent.trim().slice(0, 80));
  const errors = Array.from(document.querySelectorAll('mjx-merror'))
    .map(e => (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 80));
  const images = Array.from(document.images).map(i => ({src: i.getAttribute('src'),
    ok: i.complete && i.naturalWidth > 0}));
  const text = document.querySelector('article, main, [role="main"]') || document.body;
  const numbered = Array.from(text.querySelectorAll('img')).map(i => {
    const fig = i.closest('figure');
    return {src: (i.getAttribute('src') || '').slice(0, 80),
            numbered: !!(fig && fig.querySelector('figcaption .caption-number')),
            player: !!i.closest('.animation')};
  });
  const views = Array.from(document.querySelectorAll(
    'script[type="application/vnd.jupyter.widget-view+json"]'));
  const unrendered = views.filter(v => {
    const area = v.previousElementSibling;
    return !(area && area.classList.contains('widget-subarea') && area.childElementCount > 0
             && area.getBoundingClientRect().height > 0);
  }).map(v => v.textContent.trim().slice(0, 120));
  // what a reader sees in the labs' outputs (code inputs excepted); an output inside a closed <details>
  // (hide-output, hide-cell) is hidden until asked for
  const hidden = e => !!e.closest('details:not([open])');
  const outputs = Array.from(document.querySelectorAll(
    '.output.stream, .output.stderr, .output.text_plain, .output.traceback, .output.error'))
    .map(e => ({text: e.textContent, stderr: e.classList.contains('stderr'), hidden: hidden(e)}));
  const progressWidgets = document.querySelectorAll('.widget-progress, progress').length;
  const progressModels = Array.from(document.querySelectorAll(
    'script[type="application/vnd.jupyter.widget-state+json"]'))
    .map(s => (s.textContent.match(/"_model_name":\s*"\w*ProgressModel"/g) || []).length)
    .reduce((a, b) => a + b, 0);
  // the text column: an element of the article that reaches beyond it, or a block whose content is cut off
  // at its edge (scrolls sideways), is cut off for a reader of the page (and of its printout)
  const column = document.querySelector('article.bd-article') || document.querySelector('main')
    || document.body;
  const col = column.getBoundingClientRect();
  const wide = [];
  // the TeX of a typeset equation (MathJax keeps it), else its text, and the id of what holds it (a theorem's label)
  const tex = e => {
    try {
      const items = MathJax.startup.document.getMathItemsWithin(e);
      if (items.length) return items[0].math;
    } catch (err) { /* no MathJax: its text */ }
    return e.textContent;
  };
  for (const e of column.querySelectorAll('pre, table, img, .output, mjx-container[display="true"], code')) {
    if (hidden(e) || (e.tagName === 'PRE' && e.closest('table'))) continue;
    if (e.tagName === 'CODE' && e.closest('pre')) continue;  // a code block is measured as its <pre>
    const r = e.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const what = () => {  // named only when reported (the TeX of every display equation is not needed)
      const source = e.tagName === 'MJX-CONTAINER' ? tex(e) : (e.textContent || e.getAttribute('src') || '');
      return ((e.closest('.cell_input') ? 'code cell ' : '') + e.tagName.toLowerCase() + ' '
        + source.trim().replace(/\s+/g, ' ')).slice(0, 70);
    };
    if (r.right > col.right + 2 || r.left < col.left - 2) {
      wide.push(`wider than the text column: ${what()} (${Math.round(r.width)} px, column ${Math.round(col.width)} px)`);
    } else if (e.tagName === 'PRE' && e.scrollWidth > e.clientWidth + 2) {
      wide.push(`cut off at the column's edge (scrolls sideways): ${what()} (${e.scrollWidth} px of text in ${e.clientWidth} px)`);
    } else if (e.tagName === 'MJX-CONTAINER') {
      // the container is the column's width (the theme lets it scroll): measure the typeset math itself
      const m = e.querySelector('mjx-math');
      const mr = m ? m.getBoundingClientRect() : r;
      const right = Math.min(r.right, col.right), left = Math.max(r.left, col.left);
      if (mr.right > right + 2 || mr.left < left - 2 || e.scrollWidth > e.clientWidth + 2) {
        let holder = e.closest('[id]');  // where it is: a theorem's or a section's label, not sphinx-proof's inner ids
        while (holder && /^proof(-content)?$/.test(holder.id)) holder = holder.parentElement.closest('[id]');
        wide.push(`display equation cut off in its box: ${what()}${holder ? ' (in #' + holder.id + ')' : ''} `
          + `(${Math.round(Math.max(mr.width, e.scrollWidth))} px of math in ${Math.round(right - left)} px)`);
      }
    }
  }
  // a table cell narrower than one of its words breaks the word across lines ("s/w/a/p/p/e/d": one long cell
  // squeezed the other columns); a line may end at a space, after a hyphen, en dash, "/" or ")" (where ASCII math such
  // as (m-3)(m-5) may break), at a soft hyphen (U+00AD, a hyphenation point the text chose: the browser shows "-" there),
  // or at a <wbr> (which splits the text node); text folded in a closed <details> is not seen
  // a word wider than its cell runs across the column rule into the next cell ("competitive-", issue 33): a fixed-layout
  // column narrower than its longest word; found by the cell's scrollWidth and by each word's box against the cell's
  const brokenWords = [];
  const overflowingCells = [];
  for (const cell of column.querySelectorAll('table td, table th')) {
    if (hidden(cell)) continue;
    const box = cell.getBoundingClientRect();
    let spill = cell.scrollWidth > cell.clientWidth + 1 ? cell.scrollWidth - cell.clientWidth : 0;
    let spilled = '';
    const tw = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = tw.nextNode(); node; node = tw.nextNode()) {
      if (!node.parentElement || node.parentElement.closest('mjx-container, script, style') || hidden(node.parentElement)) continue;
      let prevLast = null;
      for (const m of node.nodeValue.matchAll(/[^\s\-\/\u2013)\u00ad]+[\-\/\u2013)\u00ad]*|[\-\/\u2013)\u00ad]+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        let rects = Array.from(range.getClientRects()).filter(q => q.width > 0 && q.height > 0);
        // Chromium also gives the hyphen it shows at a soft hyphen's break to the range of the word part after it
        if (prevLast && rects.length > 1 && node.nodeValue[m.index - 1] === '\u00ad' && rects[0].left === prevLast.left
            && rects[0].top === prevLast.top && rects[0].width === prevLast.width) rects = rects.slice(1);
        prevLast = rects.length ? rects[rects.length - 1] : null;
        const lines = new Set(rects.map(q => Math.round(q.top)));
        if (lines.size > 1) brokenWords.push(m[0].slice(0, 40));
        for (const q of range.getClientRects()) {
          if (q.width > 0 && (q.right > box.right + 1 || q.left < box.left - 1)) {
            const out = Math.max(q.right - box.right, box.left - q.left);
            if (out > spill || !spilled) { spill = Math.max(spill, out); spilled = m[0].slice(0, 40); }
          }
        }
      }
    }
    if (spill > 1) overflowingCells.push(`${JSON.stringify(spilled || cell.textContent.trim().slice(0, 40))} `
      + `(${Math.round(spill)} px past a ${Math.round(box.width)} px cell)`);
  }
  // punctuation cut off from its formula: a line that starts with the ")" or "." after inline math, or one that ends
  // with the "(" before it (the browser may break beside MathJax's box; _static/lnbook.js keeps them together)
  const orphanPunctuation = [];
  const pw = document.createTreeWalker(column, NodeFilter.SHOW_TEXT);
  for (const e of column.querySelectorAll('mjx-container:not([display="true"])')) {
    if (hidden(e) || e.closest('table')) continue;
    const boxes = Array.from(e.getClientRects()).filter(q => q.width > 0 && q.height > 0);
    if (!boxes.length) continue;
    const first = boxes[0], last = boxes[boxes.length - 1];
    pw.currentNode = e;
    let next = pw.nextNode();
    while (next && e.contains(next)) next = pw.nextNode();
    if (next && /^[)\].,;:]/.test(next.nodeValue)) {
      const r = document.createRange();
      r.setStart(next, 0); r.setEnd(next, 1);
      const q = r.getClientRects()[0];
      if (q && q.top >= last.bottom - 1) orphanPunctuation.push(`"${next.nodeValue.slice(0, 20).trim()}" after ${e.textContent.slice(0, 30)}`);
    }
    pw.currentNode = e;
    const prev = pw.previousNode();
    if (prev && !e.contains(prev) && /[(\[]$/.test(prev.nodeValue)) {
      const r = document.createRange();
      r.setStart(prev, prev.nodeValue.length - 1); r.setEnd(prev, prev.nodeValue.length);
      const q = r.getClientRects()[0];
      if (q && first.top >= q.bottom - 1) orphanPunctuation.push(`"${prev.nodeValue.slice(-20).trim()}" before ${e.textContent.slice(0, 30)}`);
    }
  }
  // inline math is not scrolled: one formula longer than the line runs past the column's edge
  for (const e of column.querySelectorAll('mjx-container:not([display="true"])')) {
    const m = e.querySelector('mjx-math');
    if (!m || hidden(e)) continue;
    const r = m.getBoundingClientRect();
    if (r.width > 0 && r.right > col.right + 2) {
      let holder = e.closest('[id]');
      while (holder && /^proof(-content)?$/.test(holder.id)) holder = holder.parentElement.closest('[id]');
      wide.push(`inline math wider than the text column: ${tex(e).trim().replace(/\s+/g, ' ').slice(0, 60)}`
        + `${holder ? ' (in #' + holder.id + ')' : ''} (${Math.round(r.width)} px, reaching ${Math.round(r.right - col.right)} px past the column)`);
    }
  }
  // a button whose glyphs spill out of it (a js_animation player's controls in a fixed-width button): the text of the
  // button, measured as drawn, must lie inside the button's box
  for (const b of column.querySelectorAll('button')) {
    if (hidden(b) || !b.textContent.trim()) continue;
    const br = b.getBoundingClientRect(), range = document.createRange();
    range.selectNodeContents(b);
    const tr = range.getBoundingClientRect();
    if (br.width > 0 && tr.width > 0 && (tr.left < br.left - 1 || tr.right > br.right + 1)) {
      wide.push(`a button's content overflows it: ${(b.getAttribute('title') || b.textContent).trim().slice(0, 40)} `
        + `(${Math.round(tr.width)} px of content in a ${Math.round(br.width)} px button)`);
    }
  }
  // an index page (Sphinx's genindex or a domain index) with no entries, or whose entries are raw labels
  // (the entry's text is the anchor it links to, e.g. thm-ln-jacobian)
  const indexes = [];
  if (column.querySelector('.genindex-jumpbox, .modindex-jumpbox')) {
    const entries = Array.from(column.querySelectorAll('table.indextable a[href], table.genindextable a[href]'));
    if (!entries.length) indexes.push('an index page with no entries (turn it off: html_use_index / html_domain_indices)');
    const labels = entries.filter(a => {
      const anchor = decodeURIComponent(new URL(a.href).hash.slice(1));
      return anchor && a.textContent.trim() === anchor;
    });
    if (labels.length) {
      indexes.push(`an index of raw labels: ${labels.length} of ${entries.length} entries show their label `
        + `(${labels.slice(0, 3).map(a => a.textContent.trim()).join(', ')}, ...) instead of a title`);
    }
  }
  // what the prose should not read like: a paragraph with many bold numbers (a glued value is plain text), and an
  // internal record key (`ch04-relu-beta0`) anywhere in the text a reader sees (code inputs excepted)
  const numberRe = /[-+\u2212]?\d[\d.,]*(?:e[-+\u2212]?\d+)?%?/g;
  const boldParagraphs = [];
  for (const p of column.querySelectorAll('p')) {
    if (p.closest('.cell_input') || p.closest('.output')) continue;
    let bold = 0;
    const tw = document.createTreeWalker(p, NodeFilter.SHOW_TEXT);
    for (let node = tw.nextNode(); node; node = tw.nextNode()) {
      const parent = node.parentElement;
      if (!parent || !/\d/.test(node.nodeValue) || parent.closest('mjx-container, code')) continue;
      if (Number(getComputedStyle(parent).fontWeight) >= 600) bold += (node.nodeValue.match(numberRe) || []).length;
    }
    if (bold) boldParagraphs.push({bold, text: p.textContent.trim().replace(/\s+/g, ' ').slice(0, 60)});
  }
  const recordKeys = [];
  const kw = document.createTreeWalker(column, NodeFilter.SHOW_TEXT);
  for (let node = kw.nextNode(); node; node = kw.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest('.cell_input, script, style, mjx-container')) continue;
    for (const m of node.nodeValue.match(RECORD_KEY) || []) recordKeys.push(m);
  }
  const columnLinks = Array.from(column.querySelectorAll('a[href]')).map(a => a.href);
  const links = Array.from(document.querySelectorAll('a[href]')).map(a => a.href);
  const ids = Array.from(document.querySelectorAll('[id]')).map(e => e.id)
    .concat(Array.from(document.querySelectorAll('a[name]')).map(e => e.name));
  return {raw, latex, indexes, math: maths.length, untypeset, errors, images, numbered, views: views.length, unrendered,
          links, ids, outputs, progressWidgets, progressModels, wide, columnLinks, boldParagraphs, recordKeys, brokenWords, overflowingCells, orphanPunctuation,
          height: document.documentElement.scrollHeight};
}
"""

_INSPECT = _INSPECT.replace("RECORD_KEY_SOURCE", json.dumps(RECORD_KEY.pattern))

# Resolves when MathJax has typeset the page and every widget view has a rendered sibling (or never).
_SETTLE = r"""
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) { await MathJax.startup.promise; }
  const views = document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]');
  const done = () => Array.from(views).every(v => v.previousElementSibling
      && v.previousElementSibling.classList.contains('widget-subarea')
      && v.previousElementSibling.childElementCount > 0);
  for (let i = 0; i < 100 && views.length && !done(); i++) { await new Promise(r => setTimeout(r, 100)); }
  return true;
}
"""


# Marks every range control outside a widget (a static player: matplotlib's to_jshtml) and the picture it drives
# (the first image of its closest container that holds one); returns how many there are.
_MARK_CONTROLS = r"""
() => {
  const controls = Array.from(document.querySelectorAll('input[type="range"]'))
    .filter(c => !c.closest('.widget-subarea, .jupyter-widgets'));
  controls.forEach((c, n) => {
    c.setAttribute('data-lnbook-control', n);
    let box = c.parentElement;
    while (box && !box.querySelector('img')) { box = box.parentElement; }
    const img = box && box.querySelector('img');
    if (img) { img.setAttribute('data-lnbook-picture', n); }
  });
  return controls.length;
}
"""

# Moves control ``n`` to a frame other than the shown one (the last, or the first when it shows the last).
_MOVE_CONTROL = r"""
(n) => {
  const c = document.querySelector(`[data-lnbook-control="${n}"]`);
  const players = Array.from(document.querySelectorAll('.anim-buttons button[title="Pause"]'));
  players.forEach(b => b.click());  // matplotlib's player: stop playing, so only the control moves the picture
  const target = Number(c.value) === Number(c.max) ? c.min : c.max;
  c.value = target;
  c.dispatchEvent(new Event('input', {bubbles: true}));
  c.dispatchEvent(new Event('change', {bubbles: true}));
  return [c.min, c.max, String(target)];
}
"""


def _check_controls(page, report: PageReport) -> None:
    """Move every static range control of ``page``; its picture must change (compared as rendered pixels)."""
    for n in range(page.evaluate(_MARK_CONTROLS)):
        picture = page.locator(f'[data-lnbook-picture="{n}"]')
        if picture.count() == 0:
            report.problems.append(f"interactive figure {n + 1}: a range control with no picture beside it")
            continue
        page.evaluate(_MOVE_CONTROL, n)  # first move: stops a playing animation where it is
        page.wait_for_timeout(200)
        before = picture.first.screenshot()
        low, high, target = page.evaluate(_MOVE_CONTROL, n)
        for _ in range(CONTROL_TRIES):  # a loaded machine may take a while to decode and paint the new frame
            page.wait_for_timeout(200)
            after = picture.first.screenshot()
            if after != before:
                break
        if before == after:
            report.problems.append(
                f"interactive figure {n + 1}: moving its control (range {low}-{high}, to {target}) does not change the picture"
            )
        else:
            report.animations += 1


# What must never be in a lab's output shown in the book (hidden with a cell tag or not): a warning, a traceback,
# a log line, a path of the machine that built the book, a progress bar drawn in text.
_NEVER = (
    ("a traceback", re.compile(r"Traceback \(most recent call last\)|^\w*(?:Error|Exception): ", re.M)),
    ("a warning", re.compile(r"\b\w*Warning\b:|^warnings\.warn", re.M)),
    ("a log line", re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d|^(?:DEBUG|INFO|WARNING|ERROR):\w", re.M)),
    ("a machine path", re.compile(
        r"(?:^|[\s'\"(=:])(?:/(?:home|Users|root|tmp|work|usr|opt|var|private|mnt|srv)/[^\s'\")]+"
        r"|[A-Za-z]:\\[^\s'\")]+)|site-packages", re.M)),
    ("a text progress bar", re.compile(r"\d{1,3}%\|[^|\n]*\|")),
)
# What a reader should not be shown raw (an output hidden with hide-output may hold it): a Python dict, a
# dataclass repr, a bare True/False. Numbers the chapter quotes are glued; tables are tables.
_RAW = (
    ("a raw dict", re.compile(r"\{(?:'[^'\n]*'|\"[^\"\n]*\"|-?\d[\w.+-]*|\([^)\n]*\)): ")),
    ("a raw object repr", re.compile(r"\b[A-Z][A-Za-z0-9]*\((?:[a-z_][a-z0-9_]*)=")),
    ("a printed True/False", re.compile(r"(?:^|[:=])\s*(?:True|False)\s*$", re.M)),
)


TEXT_TABLE_ROWS = 3  # consecutive lines that share a gutter: a table printed as text


def text_table(text: str, rows: int = TEXT_TABLE_ROWS) -> str | None:
    """The first line of a text table in ``text``, else ``None``: a run of ``rows`` or more lines that share a
    gutter, two character columns blank in every line of the run with text to their left and right in each line
    (whitespace-aligned columns). Prose and one-line results have no such gutter: single spaces separate words."""
    lines = text.split("\n")

    def gutters(line: str) -> set[int]:
        first, end = len(line) - len(line.lstrip(" ")), len(line.rstrip(" "))
        return {i for i in range(first + 1, end - 2) if line[i] == " " and line[i + 1] == " "}

    for start in range(len(lines) - rows + 1):
        common, end = gutters(lines[start]), start + 1
        while end < len(lines) and common & gutters(lines[end]):
            common &= gutters(lines[end])
            end += 1
        if end - start >= rows:
            return lines[start]
    return None


def output_problems(outputs: list[dict]) -> list[str]:
    """What a reader should not see in a page's outputs. ``outputs``: ``{"text", "stderr", "hidden"}`` per output
    (stream, stderr, plain text, traceback), as the page shows them. Anything on stderr is a warning or a log;
    :data:`_NEVER` applies to every output, :data:`_RAW` to the visible ones."""
    found = []
    for out in outputs:
        text = out["text"]
        rules = _NEVER + (() if out.get("hidden") else _RAW)
        hits = [(what, match) for what, rule in rules for match in [rule.search(text)] if match]
        if out.get("stderr") and not any(what in ("a traceback", "a warning", "a log line") for what, _ in hits):
            hits.insert(0, ("stderr (a warning or a log)", None))
        for what, match in hits:
            at = match.start() if match else 0
            line = text[text.rfind("\n", 0, at) + 1:].split("\n", 1)[0].strip() or text.strip()
            found.append(f"{what} in an output: {line[:90]!r}")
        table = None if out.get("hidden") else text_table(text)
        if table is not None:
            found.append(f"a printed text table in an output (show a lnbook.util.tables.Table): {table.strip()[:90]!r}")
    return found


def _local(url: str, base: str) -> bool:
    return url.startswith(base) or url.startswith(("data:", "blob:", "about:"))


def _site_path(url: str, base: str) -> tuple[str, str]:
    """``("book/ch01.html", "anchor")`` for an internal URL."""
    without, fragment = urldefrag(url)
    path = unquote(urlsplit(without).path)[len(urlsplit(base).path) :]
    if path == "" or path.endswith("/"):
        path += "index.html"
    return path, unquote(fragment)


def _screenshot(page, stem: Path, height: int) -> None:
    """``stem.png``, or ``stem-1.png``, ``stem-2.png``, ... for a page taller than Chromium can shoot at once.

    CSS transitions are finished before the shot (:data:`SCREENSHOT_OPTIONS`): a full-page capture re-lays the page
    out, and the theme animates the primary sidebar's ``margin-left`` (0.25 s), so a shot taken mid-transition showed
    the sidebar cut off at the left edge and the text column shifted left by 40-70 px on one or two random pages of
    each build, while the page itself (measured in the DOM before and after the shot) was laid out correctly."""
    if height <= MAX_SCREENSHOT_HEIGHT:
        _shoot(page, path=f"{stem}.png", full_page=True, **SCREENSHOT_OPTIONS)
        return
    for n, top in enumerate(range(0, height, MAX_SCREENSHOT_HEIGHT), start=1):
        clip = {"x": 0, "y": top, "width": VIEWPORT["width"], "height": min(MAX_SCREENSHOT_HEIGHT, height - top)}
        _shoot(page, path=f"{stem}-{n}.png", full_page=True, clip=clip, **SCREENSHOT_OPTIONS)


SHOT_TRIES = 3  # Chromium's "Unable to capture screenshot" (no frame in time, seen on a loaded 2-core CI machine)


def _shoot(page, **options) -> None:
    """``page.screenshot(**options)``, tried again (up to :data:`SHOT_TRIES` times, 0.5 s apart) when Chromium
    answers "Unable to capture screenshot": its compositor gave no frame in time (once in a CI run on a loaded machine,
    while the same shot passes alone); any other error, or the same one every time, is raised."""
    for attempt in range(1, SHOT_TRIES + 1):
        try:
            page.screenshot(**options)
            return
        except Exception as err:  # playwright's Error; imported lazily like the rest of playwright here
            if "Unable to capture screenshot" not in str(err) or attempt == SHOT_TRIES:
                raise
            page.wait_for_timeout(500)


def _wait_until_quiet(page, network: dict, report) -> None:
    """Wait until ``page`` has had no request in flight for ``QUIET_MS``; else report what is still loading.

    ``network`` is ``{"in_flight": {id: request}, "last": time of the last request event}``, kept up to
    date by the page's request events (which the sync API delivers while this waits)."""
    start = time.monotonic()
    while network["in_flight"] or time.monotonic() - network["last"] < QUIET_MS / 1000:
        if time.monotonic() - start > PAGE_TIMEOUT_S:
            stuck = sorted({r.url for r in network["in_flight"].values()})
            report.problems.append(f"still loading after {PAGE_TIMEOUT_S} s: {stuck[:5] or 'requests every few ms'}")
            return
        page.wait_for_timeout(100)


def browser_jobs(pages: int) -> int:
    """Pages checked at once: ``LNBOOK_BROWSER_JOBS``, else the CPU count (at most 4), never more than ``pages``."""
    value = os.environ.get(JOBS_ENV_VAR, "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{JOBS_ENV_VAR} must be a whole number >= 1 (browsers at once), got {value!r}")
        jobs = int(value)
    else:
        jobs = min(4, os.cpu_count() or 1)
    return max(1, min(jobs, pages))


def _check_page(context, base: str, site: Path, path: Path, shots: Path) -> tuple[PageReport, set[str], list[str]]:
    """Open one page in ``context``; its report, its ids and its internal links."""
    rel = path.relative_to(site).as_posix()
    report = PageReport(rel)
    page = context.new_page()
    page.set_default_timeout(PAGE_TIMEOUT_S * 1000)
    network = {"in_flight": {}, "last": time.monotonic()}

    def started(r, n=network):
        n["in_flight"][id(r)] = r
        n["last"] = time.monotonic()

    def ended(r, n=network):
        n["in_flight"].pop(id(r), None)
        n["last"] = time.monotonic()

    page.on("request", started)
    page.on("requestfinished", ended)
    page.on("requestfailed", ended)
    page.on(
        "pageerror",
        lambda err: str(err) not in HARMLESS_JS_ERRORS and report.problems.append(f"JavaScript error: {err}"),
    )
    page.on(
        "response",
        lambda resp: resp.status >= 400 and report.problems.append(f"HTTP {resp.status} for {resp.url[len(base):]}"),
    )
    page.goto(base + rel, wait_until="load")
    _wait_until_quiet(page, network, report)
    page.evaluate(_SETTLE)
    page.wait_for_timeout(200)  # let the last layout settle before reading sizes
    found = page.evaluate(_INSPECT)
    report.math = found["math"] - len(found["untypeset"])
    report.problems += [f"math not typeset: {t!r}" for t in found["untypeset"]]
    report.problems += [f"MathJax error: {t!r}" for t in found["errors"]]
    report.problems += [f"raw TeX delimiter in the text: {t!r}" for t in found["raw"]]
    report.problems += [f"raw LaTeX command in the text: {t!r}" for t in found["latex"]]
    report.problems += found["indexes"]
    report.images = sum(1 for i in found["images"] if i["ok"])
    report.problems += [f"image missing: {i['src']}" for i in found["images"] if not i["ok"]]
    report.figures = sum(1 for i in found["numbered"] if i["numbered"])
    if CHAPTER_PAGES.match(rel):
        report.problems += [
            f"image not in a numbered figure (use {{glue:figure}} with :name: and a caption): {i['src']}"
            for i in found["numbered"] if not i["numbered"]
        ]
    lab = LAB_PAGES.match(rel)
    if lab:
        report.problems += [
            "lab image not in a numbered figure (give its cell the metadata "
            f"mystnb.figure.caption and .name, and refer to it with {{numref}}): {i['src']}"
            for i in found["numbered"] if not i["numbered"]
        ]
    if (lab or CHAPTER_PAGES.match(rel)) and found["views"]:
        report.problems.append(
            f"{found['views']} live widget(s) in the page: without a kernel a widget shows its build-time state and "
            "does nothing when moved (tag its cell remove-output; show precomputed frames with js_animation)"
        )
    _check_controls(page, report)
    report.widgets = found["views"] - len(found["unrendered"])
    report.problems += [f"widget view not rendered: {t}" for t in found["unrendered"]]
    report.problems += output_problems(found["outputs"])
    if found["progressWidgets"] or found["progressModels"]:
        report.problems.append(
            f"progress bar in the page: {found['progressWidgets']} drawn, {found['progressModels']} in the widget state "
            "(bars are for people who run a notebook; the runner turns them off)"
        )
    report.problems += found["wide"]
    if found["brokenWords"]:
        words = found["brokenWords"]
        report.problems.append(
            f"{len(words)} word(s) broken across lines in a table (a column narrower than its longest word: keep short "
            f"cells on one line, let only prose wrap at spaces): {', '.join(repr(w) for w in words[:6])}"
            + (", ..." if len(words) > 6 else "")
        )
    report.problems += [
        f"punctuation cut off from its formula at a line break (keep it with the math: _static/lnbook.js): {p}"
        for p in found["orphanPunctuation"]
    ]
    if found["overflowingCells"]:
        cells = found["overflowingCells"]
        report.problems.append(
            f"{len(cells)} table cell(s) whose text runs past the cell into the next column (a column narrower than "
            f"a word of it: widen the column or shorten the word): {', '.join(cells[:6])}" + (", ..." if len(cells) > 6 else "")
        )
    report.problems += [
        f"{p['bold']} bold numbers in one paragraph (at most {BOLD_NUMBERS_PER_PARAGRAPH}: glue numbers plainly, "
        f"put the rest in a table or a dropdown): {p['text']!r}"
        for p in found["boldParagraphs"] if p["bold"] > BOLD_NUMBERS_PER_PARAGRAPH
    ]
    if rel not in RECORD_KEY_PAGES_EXEMPT:
        report.problems += [
            f"record key in the text (say what was compared, in words): {key}"
            for key in sorted(set(found["recordKeys"]), key=found["recordKeys"].index)
        ]
    links = [u for u in found["links"] if u.startswith(base)]
    report.column_links = sorted({_site_path(u, base)[0] for u in found["columnLinks"] if u.startswith(base)})
    # back to the top: moving a player's control scrolled the page to it, and a full-page shot of a scrolled page
    # paints the theme's fixed elements (the skip link, the sidebars) over the text at the scroll position
    page.evaluate("window.scrollTo(0, 0)")
    _screenshot(page, shots / rel.removesuffix(".html").replace("/", "__"), found["height"])
    page.close()
    return report, set(found["ids"]), links


def _browser_worker(executable: str, base: str, site: Path, shots: Path, todo: queue.Queue, done: dict, outside: list):
    """One browser (its own Playwright, in its own thread) that checks pages from ``todo`` until it is empty."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=list(CHROMIUM_FLAGS), headless=True)
        try:
            context = browser.new_context(viewport=VIEWPORT, service_workers="block")

            def route(r):
                if _local(r.request.url, base):
                    r.continue_()
                else:
                    outside.append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            while True:
                try:
                    path = todo.get_nowait()
                except queue.Empty:
                    return
                done[path] = _check_page(context, base, site, path, shots)
        finally:
            browser.close()


def check_site(
    site: Path, screenshots: Path | None = None, pages: list[Path] | None = None, toc_root: Path | None = None
) -> SiteReport:
    """Check every page of ``site`` (or only ``pages``) in Chromium; see the module docstring.

    Pages are checked :func:`browser_jobs` at a time, each browser in its own thread (the largest pages
    first, so that the browsers finish together); the report lists them in the order of ``pages``.
    With ``toc_root`` (the folder of the book's ``_toc.yml``), the toc's root page must link, in its text, to
    every chapter's prose page (:func:`lnbook.book.toc.chapter_docs`)."""
    site = Path(site).resolve()
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"no built book at {site}: build it first (make book)")
    executable = chromium_path()
    pages = html_pages(site) if pages is None else [Path(p).resolve() for p in pages]
    jobs = browser_jobs(len(pages))
    shots = site.parent / "screenshots" if screenshots is None else Path(screenshots)
    if shots.exists():
        shutil.rmtree(shots)
    shots.mkdir(parents=True)
    outside: list[str] = []
    done: dict[Path, tuple[PageReport, set[str], list[str]]] = {}
    todo: queue.Queue = queue.Queue()
    for path in sorted(pages, key=lambda p: -p.stat().st_size):
        todo.put(path)
    with serve(site) as base, ThreadPoolExecutor(jobs) as pool:
        workers = [pool.submit(_browser_worker, executable, base, site, shots, todo, done, outside) for _ in range(jobs)]
        for worker in workers:
            worker.result()  # a browser's failure is raised here
    reports = [done[path][0] for path in pages]
    ids = {done[path][0].page: done[path][1] for path in pages}
    for path in pages:
        report, _, links = done[path]
        for url in links:
            target, anchor = _site_path(url, base)
            report.links += 1
            if not (site / target).is_file():
                report.problems.append(f"broken link: {target} does not exist")
            elif anchor and target in ids and anchor not in ids[target]:
                report.problems.append(f"broken link: no anchor #{anchor} in {target}")
    if toc_root is not None:
        _check_index(reports, toc_root)
    return SiteReport(reports, sorted(set(outside), key=outside.index), shots)


def _check_index(reports: list[PageReport], toc_root: Path) -> None:
    """The toc's root page names every chapter: a chapter of ``_toc.yml`` its text does not link is reported."""
    from lnbook.book.toc import chapter_docs, toc_files

    files = toc_files(Path(toc_root))
    if not files:
        raise ValueError(f"{toc_root}/_toc.yml names no root page")
    index = next((r for r in reports if r.page == f"{files[0]}.html"), None)
    if index is None:
        return  # the root page was not among the pages checked
    for cid, doc in sorted(chapter_docs(Path(toc_root)).items()):
        if f"{doc}.html" not in index.column_links:
            index.problems.append(f"chapter {cid} of _toc.yml ({doc}) is missing from the index: its text does not link it")
