"""JSON for people: highlighted, scrollable and copyable.

``json_highlighted`` highlights a document for a read-only pane; the JSON report dialog
(app/screens/dialogs/json_report.py) shows a long report in a TextArea.
"""

from __future__ import annotations

import importlib.util

from textual.content import Content
from textual.highlight import highlight


def json_highlighted(text: str) -> Content:
    """JSON highlighted with the same Pygments lexer rich's Syntax uses, but styled with the
    theme's variables: rich's ``Syntax`` paints its own background bands, which clash with
    every theme but one."""
    return highlight(text, language="json")


def text_area_language(language: str) -> str | None:
    """TextArea highlights only with tree-sitter (an extra dependency); plain text otherwise."""
    return language if importlib.util.find_spec("tree_sitter") is not None else None

