"""Every repository path README.md and docs/ name exists: a file or folder (`app/local/`), or a
module and a name defined in it (`widgets/app_header.AppHeader`). A move that forgets the docs
fails here, not in a newcomer's hands. The same for the test files app/ and widgets/ name."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP_FOLDERS = ("app", "widgets", "tests", "configs", "benchmarks", "docs", ".ci")
TOPS = "|".join(re.escape(top) for top in TOP_FOLDERS)
PATH = re.compile(rf"(?<![\w./-])((?:{TOPS})/[\w./-]*[\w/])")
# Paths that exist only once something runs: named here with what makes them.
MADE_LATER = {
    "benchmarks/results/latest.json": "written by `python -m benchmarks`",
    "app/bundled_configs": "the wheel's copy of configs/ (pyproject.toml's force-include)",
}


def named_paths() -> list[tuple[str, str]]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [(str(doc.relative_to(ROOT)), match.group(1).rstrip("."))
            for doc in docs for match in PATH.finditer(doc.read_text(encoding="utf-8"))]


def exists(named: str) -> bool:
    path = named.split("::")[0]
    if (ROOT / path).exists() or path in MADE_LATER:
        return True
    module, _, name = path.rpartition(".")  # widgets/app_header.AppHeader
    source = ROOT / f"{module}.py"
    if not module or not source.is_file():
        return False
    return re.search(rf"^\s*(?:async def|def|class) {re.escape(name)}\b|^{re.escape(name)}\s*[:=]",
                     source.read_text(encoding="utf-8"), re.MULTILINE) is not None


def test_the_docs_name_paths_at_all():
    assert len(named_paths()) > 100


def test_every_path_the_docs_name_exists():
    missing = sorted({f"{doc}: {path}" for doc, path in named_paths() if not exists(path)})
    assert not missing, "named in the docs but not in the repository:\n" + "\n".join(missing)


def test_made_later_paths_are_still_named():
    named = {path for _, path in named_paths()}
    assert set(MADE_LATER) <= named, set(MADE_LATER) - named


# A test file the code names (`tests/compat/test_trl_names.py` in a docstring or a comment).
TEST_FILE = re.compile(r"(?<![\w./-])(tests/[\w./-]*\.py)\b")


def code_named_test_files() -> list[tuple[str, str]]:
    sources = sorted([*(ROOT / "app").rglob("*.py"), *(ROOT / "widgets").rglob("*.py")])
    return [(str(source.relative_to(ROOT)), match.group(1))
            for source in sources for match in TEST_FILE.finditer(source.read_text(encoding="utf-8"))]


def test_every_test_file_the_code_names_exists():
    """Walk 37 item 9: the compat modules named test files renamed to *_names.py."""
    named = code_named_test_files()
    assert len(named) > 5
    missing = sorted({f"{source}: {path}" for source, path in named if not (ROOT / path).is_file()})
    assert not missing, "named in app/ or widgets/ but not in tests/:\n" + "\n".join(missing)
