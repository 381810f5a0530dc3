"""Local files and folders a command writes (``--output``, ``--html``, ``--png-dir``): checked
before any work, so a target that cannot be written is a :class:`UsageError` in one sentence, not
a traceback after minutes of replay. No Delta or Spark import: ``generate`` and ``capture`` use it
too."""

from __future__ import annotations

import os
from pathlib import Path

from pipelines.app.errors import UsageError
from pipelines.storage.fs import is_remote


def check_local_output(output: str) -> None:
    """``UsageError`` when a local ``output`` is a file, or a folder that cannot be created or
    written (:func:`check_creatable`); an object store's location is checked by reading it."""
    if is_remote(output):
        return
    if Path(output).is_file():
        raise UsageError(f"--output {output} is a file, not a folder")
    check_creatable(output, "--output")


def check_html_target(html: str | None) -> None:
    """``UsageError`` when ``--html`` names a directory, or a file that cannot be created
    (:func:`check_creatable`)."""
    if html and Path(html).is_dir():
        raise UsageError(f"--html {html} is a directory; give a file name")
    if html:
        check_creatable(html, "--html")


def check_png_dir(png_dir: str | None) -> None:
    """``UsageError`` when ``--png-dir`` names a file, or a folder that cannot be created or
    written (:func:`check_creatable`)."""
    if png_dir and Path(png_dir).exists() and not Path(png_dir).is_dir():
        raise UsageError(f"--png-dir {png_dir} is a file, not a folder")
    if png_dir:
        check_creatable(png_dir, "--png-dir")


def check_creatable(path: str, flag: str) -> None:
    """``UsageError`` when ``path`` (a local file or folder a command will write, its missing
    parents created) cannot be: its nearest existing ancestor is not a writable folder. Checks
    only, creates nothing."""
    p = Path(path).absolute()
    if p.exists():
        ok = os.access(p if p.is_dir() else p.parent, os.W_OK)
    else:
        ancestor = next(a for a in p.parents if a.exists())
        ok = ancestor.is_dir() and os.access(ancestor, os.W_OK | os.X_OK)
    if not ok:
        raise UsageError(f"{flag} {path} cannot be written (no writable folder on its path)")
