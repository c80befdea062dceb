"""The JavaScript the HTML book needs, served by the book itself so that it reads with no network.

Sphinx and myst-nb load MathJax, RequireJS and the ipywidgets HTML manager from CDNs by default. The
build fetches them once from the npm registry (``npm pack``, integrity-checked against the hashes
below) into ``_offline/vendor/``; ``_config.yml`` copies ``_offline/`` into the site
(``html_extra_path``, not ``_static/``, whose every file would be added to every page) and points
``mathjax_path`` and myst-nb's ``nb_ipywidgets_js`` at the copies. Nothing here is committed.

``vendor/widgets-offline.js`` (written here, loaded between RequireJS and the HTML manager) tells
the manager where its fonts are, and gives MathJax 3 the one MathJax-2 entry point the manager calls.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

__all__ = ["ASSETS_DIR", "PACKAGES", "ensure_assets", "assets_ready"]

ASSETS_DIR = "_offline"  # under the book's root; its content lands at the root of the site
VENDOR = "vendor"

# name in the site -> (npm spec, registry integrity, what to keep from the package)
PACKAGES = {
    "mathjax": (
        "mathjax@3.2.2",
        "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
        ("es5", "LICENSE"),
    ),
    "html-manager": (
        "@jupyter-widgets/html-manager@1.0.6",
        "sha512-+Mn+Ra8wyIHrYaUpfmf9A3dsLkt/NuwzPQN8sthdxBD35VV5cOJbpmgMhNR27n/rmP3mKyEe0PWCJrtZrXTXDQ==",
        ("dist", "LICENSE"),
    ),
    "requirejs": (
        "requirejs@2.3.8",
        "sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
        ("require.js", "README.md"),
    ),
}

WIDGETS_OFFLINE_JS = """\
// Written by lnbook.book.assets: lets the ipywidgets HTML manager 1.x work offline beside MathJax 3.
(function () {
  var dist = new URL("html-manager/dist/", document.currentScript.src).href;
  // The bundle loads its fonts from a public path taken from the AMD module's address: map the
  // module's name to the copy served with the book, and tell the bundle's own runtime the same.
  window.__jupyter_widgets_assets_path__ = dist;
  if (window.require && window.require.config) {
    window.require.config({paths: {"@jupyter-widgets/html-manager/dist": dist.replace(/\\/$/, "")}});
  }
  // html-manager 1.x typesets widget labels through MathJax 2's MathJax.Hub.Queue; the book loads
  // MathJax 3 (deferred, so it exists once the document is parsed): give it that one entry point.
  document.addEventListener("DOMContentLoaded", function () {
    var mj = window.MathJax;
    if (!mj || mj.Hub || !mj.startup) return;
    mj.Hub = {Queue: function (job) {
      var el = job && job[2];
      if (el) mj.startup.promise.then(function () { return mj.typesetPromise([el]); });
    }};
  });
})();
"""


# Folders of the site whose pages may show widgets: the HTML manager's fonts are also served at
# <folder>/@jupyter-widgets/, where the bundle asks for them when its CSS is injected before
# widgets-offline.js has set the public path (seen on a loaded CI machine: three 404s on the ch01 lab page)
FALLBACK_FONT_FOLDERS = ("book", "notebooks")
FONT_SUFFIXES = (".woff2", ".woff", ".ttf", ".eot", ".svg")


def _copy_fallback_fonts(dist: Path, site_root: Path) -> None:
    fonts = [f for f in dist.iterdir() if f.suffix in FONT_SUFFIXES]
    for folder in FALLBACK_FONT_FOLDERS:
        target = site_root / folder / "@jupyter-widgets"
        target.mkdir(parents=True, exist_ok=True)
        for font in fonts:
            shutil.copy2(font, target / font.name)


def _stamp() -> dict:
    return {name: spec for name, (spec, _, _) in PACKAGES.items()} | {
        "widgets-offline.js": WIDGETS_OFFLINE_JS, "fallback fonts": list(FALLBACK_FONT_FOLDERS)}


def assets_ready(root: Path) -> bool:
    """Whether ``root/_offline`` holds the packages this version of the book wants."""
    stamp = Path(root) / ASSETS_DIR / ".complete.json"
    try:
        return json.loads(stamp.read_text()) == _stamp()
    except (OSError, json.JSONDecodeError):
        return False


def ensure_assets(root: Path, quiet: bool = False) -> Path:
    """Fetch the assets into ``root/_offline`` unless they are there already; return that folder."""
    target = Path(root) / ASSETS_DIR
    if assets_ready(root):
        return target
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            "npm not found: the offline book serves MathJax and the widget manager from the npm registry's "
            "packages. Install Node.js with npm (Debian: apt-get install -y nodejs npm) and build again."
        )
    with tempfile.TemporaryDirectory(prefix="lnbook-assets-") as tmp:
        tmp = Path(tmp)
        specs = [spec for spec, _, _ in PACKAGES.values()]
        proc = subprocess.run(
            [npm, "pack", *specs, "--json", "--pack-destination", str(tmp)],
            capture_output=True, text=True, cwd=tmp,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"npm pack {' '.join(specs)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        packed = {entry["id"]: entry for entry in json.loads(proc.stdout)}
        staging = tmp / "site" / VENDOR
        for name, (spec, integrity, keep) in PACKAGES.items():
            entry = packed.get(spec)
            if entry is None or entry.get("integrity") != integrity:
                got = None if entry is None else entry.get("integrity")
                raise RuntimeError(f"npm pack {spec}: integrity {got!r} is not the pinned {integrity!r}")
            unpacked = tmp / "unpacked" / name
            with tarfile.open(tmp / entry["filename"]) as tar:
                tar.extractall(unpacked, filter="data")
            for part in keep:
                src, dst = unpacked / "package" / part, staging / name / part
                if src.is_dir():
                    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.map"))
                else:
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, dst)
        (staging / "widgets-offline.js").write_text(WIDGETS_OFFLINE_JS)
        _copy_fallback_fonts(staging / "html-manager" / "dist", staging.parent)
        (staging.parent / ".complete.json").write_text(json.dumps(_stamp(), indent=1) + "\n")
        if target.exists():
            shutil.rmtree(target)
        shutil.move(str(staging.parent), str(target))
    if not quiet:
        print(f"offline assets ready in {target} ({', '.join(specs)})")
    return target
