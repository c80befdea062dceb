"""A Sphinx extension: every figure glued into a chapter from a notebook gets its image file.

A chapter page shows a notebook's figure with ``{glue:any} key`` (cross-document glue). myst-nb 1.x
resolves it when writing the page and points at ``_images/<sha256 of the PNG>.png``, but writes
that file only when the notebook's own page shows the very same bytes. A figure glued with
``display=False`` and then drawn again (a 3-D plot renders differently the second time) left the
chapter with a missing image. This extension writes every glued image into ``_images/`` after the
HTML is built, under the name myst-nb uses. (Added to ``sphinx.extra_extensions`` in ``_config.yml``.)
"""

from __future__ import annotations

import hashlib
import json
from binascii import a2b_base64
from mimetypes import guess_extension
from pathlib import Path

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif")


def glued_images(glue_json: dict) -> dict[str, bytes]:
    """``{file name: bytes}`` of the images in one ``<notebook>.glue.json``, named as myst-nb names them.

    >>> import base64
    >>> data = {"k": {"data": {"image/png": base64.b64encode(b"png").decode()}}}
    >>> list(glued_images(data)) == [hashlib.sha256(b"png").hexdigest() + ".png"]
    True
    """
    found = {}
    for output in glue_json.values():
        data = output.get("data", {}) if isinstance(output, dict) else {}
        for mime in IMAGE_TYPES:
            if mime in data:
                raw = a2b_base64(data[mime])
                extension = guess_extension(mime) or "." + mime.rsplit("/")[-1]
                extension = ".jpeg" if extension == ".jpe" else extension
                found[f"{hashlib.sha256(raw).hexdigest()}{extension}"] = raw
    return found


def write_glued_images(app, exception) -> None:
    """``build-finished``: write the glued images of every notebook into the site's image folder."""
    if exception is not None or app.builder.format != "html":
        return
    source = Path(app.env.mystnb_config.output_folder)
    target = Path(app.builder.outdir) / app.builder.imagedir
    for path in sorted(source.rglob("*.glue.json")):
        for name, raw in glued_images(json.loads(path.read_text())).items():
            if not (target / name).exists():
                target.mkdir(parents=True, exist_ok=True)
                (target / name).write_bytes(raw)


def setup(app):
    app.connect("build-finished", write_glued_images)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
