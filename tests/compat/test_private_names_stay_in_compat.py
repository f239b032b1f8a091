"""Other libraries' private names are named only in their compat modules (and the tests of
those): elsewhere the code asks the compat module (docs/testing.md#other-libraries-internals)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIBRARIES = ("textual", "textual_serve", "textual_plotext", "plotext", "trl")
# Where a library's private names may be named.
COMPAT = {"widgets/compat/textual_compat.py", "widgets/compat/plotext_compat.py",
          "widgets/compat/textual_plotext_compat.py", "app/web/serve_compat.py", "app/local/policies/trl_compat.py",
          "tests/support/textual_compat.py"}
# The private names the compat modules wrap that no module of ours uses for its own things:
# attributes read or set, and methods overridden.
WRAPPED = frozenset({
    "_notifications", "_unnotify", "_next_callbacks", "_push_result_callback", "_pruning", "_bindings_ready",
    "_scroll_update", "_driver", "_update_size", "_update_maximum_width", "_process_line", "_compositor",
    "_refresh_layout", "_parse_rules", "_character_to_key", "_set_size", "_set_sizes", "_build_matrix",
    "_get_plotext_theme_name", "_build_environment", "_open_app_process", "_download_manager",
    "_last_loaded_step",
})


def python_files() -> list[Path]:
    files = [path for folder in ("app", "widgets", "benchmarks", "scripts", "tests") for path in
             (REPO / folder).rglob("*.py")]
    return [path for path in files if path.relative_to(REPO).as_posix() not in COMPAT
            and path.parent != REPO / "tests" / "compat"]


def private_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] in LIBRARIES and any(part.startswith("_") and not part.startswith("__") for part in parts)


def uses(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {alias.name}") for alias in node.names if private_module(alias.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if private_module(node.module):
                found.append((node.lineno, f"from {node.module} import"))
            elif node.module.split(".")[0] in LIBRARIES:
                found += [(node.lineno, f"from {node.module} import {alias.name}") for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
        elif isinstance(node, ast.Attribute) and node.attr in WRAPPED:
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in WRAPPED:
            found.append((node.lineno, f"def {node.name}"))
    return sorted(found)


def test_private_names_of_other_libraries_are_named_only_in_compat_modules():
    found = [f"{path.relative_to(REPO)}:{line}: {what}" for path in python_files()
             for line, what in uses(ast.parse(path.read_text(encoding="utf-8")))]
    assert found == [], "ask the library's compat module instead (widgets/compat/, app/web/serve_compat.py, " \
                        "app/local/policies/trl_compat.py, tests/support/textual_compat.py):\n" + "\n".join(found)


def test_the_check_finds_what_it_looks_for():
    source = ("import plotext._utility as u\nfrom textual.keys import _character_to_key\n"
              "from textual.widgets._footer import FooterKey\napp._notifications\ndef _update_size(): pass\n")
    assert [what for _, what in uses(ast.parse(source))] == [
        "import plotext._utility", "from textual.keys import _character_to_key", "from textual.widgets._footer import",
        "._notifications", "def _update_size"]
