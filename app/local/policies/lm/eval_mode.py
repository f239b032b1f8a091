"""The model in eval mode for one forward pass of the generation loop, cheaply
(app/local/policies/lm/batching.py; docs/embedded-policy.md#batched-generation)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


class EvalMode:
    """The model in eval mode for a forward pass and each module's own mode put back after, as
    `model.eval()` and `model.train(was)` would, without their walk: nn.Module.train goes through
    every module's __setattr__, about 10 ms each way for SmolLM2-135M with LoRA's 2,500 modules,
    paid at every forward pass of the loop; here the pair costs under 1 ms. The modules are listed
    again for another model or weights version (a load, an update); a model with a module that
    overrides `train`, or one kernelized with the Hub's kernels (which a switch kernelizes again:
    the backend loads without them, app/local/policies/lm/model.py LOAD_OPTIONS), is switched by
    `train` itself."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._modules: list[torch.nn.Module] = []
        self._plain = False

    @contextmanager
    def eval(self, model: Any, version: int) -> Iterator[None]:
        self._list(model, version)
        if not self._plain:
            was_training = model.training
            model.eval()
            try:
                yield
            finally:
                model.train(was_training)
            return
        modes = [module.training for module in self._modules]
        for module in self._modules:
            module.__dict__["training"] = False  # what Module.train sets, without __setattr__
        try:
            yield
        finally:
            for module, mode in zip(self._modules, modes, strict=True):
                module.__dict__["training"] = mode

    def _list(self, model: Any, version: int) -> None:
        key = (id(model), version)
        if key == self._key:
            return
        from transformers import PreTrainedModel

        plain_train = (torch.nn.Module.train, PreTrainedModel.train)
        self._modules = list(model.modules())
        self._plain = all(type(module).train in plain_train and not getattr(module, "use_kernels", False)
                          for module in self._modules)
        self._key = key
