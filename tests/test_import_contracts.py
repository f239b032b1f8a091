"""The import contracts of pyproject.toml hold: the layers (command line, front ends, screens,
widgets, core), a core and an embedded backend without Textual, a headless front end without
Textual, run records that do not import the launch. One check, by import-linter itself
(docs/architecture.md#layers), so the README's test command catches a broken layer as .ci/run's
lint step does."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_import_contract_is_kept(monkeypatch, capsys):
    from importlinter.cli import lint_imports

    monkeypatch.chdir(REPO)
    code = lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True)
    out = capsys.readouterr().out
    assert code == 0, out[-4000:]
    assert "0 broken" in out
