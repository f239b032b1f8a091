"""What the embedded backend reaches inside transformers beyond its documented switches, in one
place. Written against transformers 5.x (the version the trainer extra installs).

transformers' GGUF loader calls tqdm itself ("Converting and de-quantizing GGUF tensors") and
tqdm reads its environment only as it is imported, so neither HF_HUB_DISABLE_PROGRESS_BARS nor
transformers' disable_progress_bar silences it. tests/compat/test_transformers_names.py fails,
naming the installed version, when the module or its `tqdm` name goes.
"""

from __future__ import annotations

import functools
from typing import Any

GGUF_LOADER = "transformers.modeling_gguf_pytorch_utils"


def silence_gguf_loader_bar() -> None:
    """The GGUF loader's tqdm, disabled (once; nothing when the loader has none)."""
    import importlib

    loader: Any = importlib.import_module(GGUF_LOADER)
    bar = getattr(loader, "tqdm", None)
    if bar is not None and not isinstance(bar, functools.partial):
        loader.tqdm = functools.partial(bar, disable=True)
