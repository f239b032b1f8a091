"""What app/local/policies/transformers_compat.py reaches inside transformers is still there: the
GGUF loader module and the tqdm it calls. Read as source, not imported: importing transformers'
GGUF loader imports torch (the slow tier's)."""

from __future__ import annotations

import importlib.util
from importlib.metadata import version
from pathlib import Path

import pytest

from app.local.policies.transformers_compat import GGUF_LOADER


def test_the_gguf_loader_calls_a_module_level_tqdm():
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("transformers is not installed: pip install -e '.[test,trainer]'", pytrace=False)
    source = Path(spec.submodule_search_locations[0]) / (GGUF_LOADER.split(".", 1)[1] + ".py")
    said = f"{GGUF_LOADER}'s tqdm: app/local/policies/transformers_compat.py; transformers {version('transformers')}"
    assert source.is_file(), said
    text = source.read_text(encoding="utf-8")
    assert "from tqdm" in text and "tqdm(" in text, said
