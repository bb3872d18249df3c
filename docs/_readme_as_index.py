"""mkdocs hook: the README is the site's front page (one text, not a copy to keep in step).

Links from the README into docs/ are rewritten to the pages beside it.
"""

from __future__ import annotations

import pathlib
from typing import Any

from mkdocs.structure.files import File, Files

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def on_files(files: Files, config: Any) -> Files:
    """Add the README as ``index.md``."""
    text = README.read_text().replace("](docs/", "](")
    files.append(File.generated(config, "index.md", content=text))
    return files
