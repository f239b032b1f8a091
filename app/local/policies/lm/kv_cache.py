"""The KV caches of the `lm` policy's generation loop (app/local/policies/lm/batching.py): the
episodes' caches kept between their turns (`KeptCaches`), and the batch's layers, which grow in
place (`growing`). docs/embedded-policy.md#batched-generation.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch

# The kept KV caches of episodes between their turns, at most this many bytes (SmolLM2-135M
# in float32: about 46 KB a token, so 256 MB hold some 5,500 tokens); the oldest is dropped first.
KEPT_CACHE_BYTES = 256 * 10**6
# A new episode's prompt starts from another's kept cache when they share at least this many
# tokens (a step's episodes share the system prompt and the tools; a group's, the whole first prompt).
MIN_SHARED_PREFIX = 16
# Positions a batch layer's buffers keep free past its length: a step writes its new keys and
# values there instead of copying the whole batch's cache into a longer tensor (DynamicLayer's
# concatenation: on the order of 100 MB a step with 8 rows of SmolLM2-135M).
GROWTH_ROOM = 64


@dataclass
class Kept:
    """An episode's KV cache between turns: per layer (keys, values) of batch 1 covering `ids`."""

    ids: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]
    nbytes: int


class KeptCaches(OrderedDict[str, Kept]):
    """The episodes' kept caches, oldest first, within KEPT_CACHE_BYTES (`nbytes` in all)."""

    nbytes = 0

    def reusable(self, episode: str, prompt: list[int]) -> Kept | None:
        """A kept cache `prompt` extends: the episode's own (taken: the turn's replaces it), else
        the longest prefix another episode's holds (the system prompt and the tools: shared, the
        other keeps it), cut to leave at least the prompt's last token to feed; None when none
        holds MIN_SHARED_PREFIX tokens of it."""
        own = self._taken(episode)
        best, shared = None, 0
        for kept in ([own] if own is not None else []) + list(reversed(self.values())):
            n = _common_prefix(kept.ids, prompt, len(prompt) - 1)
            if n > shared:  # the episode's own first: it wins a tie
                best, shared = kept, n
        if best is None or (best is not own and shared < MIN_SHARED_PREFIX):
            return None
        if shared < len(best.ids):
            return Kept(best.ids[:shared], [(k[:, :, :shared], v[:, :, :shared]) for k, v in best.layers], 0)
        return best

    def store(self, episode: str, ids: list[int], layers: list[tuple[torch.Tensor, torch.Tensor]],
              copied: bool = False) -> None:
        """`layers` (batch 1, covering `ids`; copied here unless `copied`: tensors no one else
        holds) kept for `episode`, within KEPT_CACHE_BYTES (the oldest dropped first)."""
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        self._taken(episode)
        if nbytes > KEPT_CACHE_BYTES:
            return
        self[episode] = Kept(list(ids), layers if copied else [(k.clone(), v.clone()) for k, v in layers], nbytes)
        self.nbytes += nbytes
        while self.nbytes > KEPT_CACHE_BYTES:
            _, dropped = self.popitem(last=False)
            self.nbytes -= dropped.nbytes

    def clear(self) -> None:
        super().clear()
        self.nbytes = 0

    def _taken(self, episode: str) -> Kept | None:
        kept = self.pop(episode, None)
        if kept is not None:
            self.nbytes -= kept.nbytes
        return kept


def _grown(old: torch.Tensor, new: torch.Tensor, room: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(`old` followed by `new` along the positions, its buffer): keys or values, [rows, heads,
    length, dim]. Written in place into `room` when `old` is its start and it has space left, else
    into a new buffer with GROWTH_ROOM positions to spare. The first is a view of the second."""
    length, more = old.shape[2], new.shape[2]
    if (room is None or room.data_ptr() != old.data_ptr() or room.stride() != old.stride()
            or room.shape[:2] != old.shape[:2] or room.shape[2] < length + more):
        room = old.new_empty(old.shape[0], old.shape[1], length + more + GROWTH_ROOM, old.shape[3])
        room[:, :, :length].copy_(old)
    room[:, :, length:length + more].copy_(new)
    return room[:, :, :length + more], room


@functools.cache
def _growing_layer() -> type:
    """DynamicLayer (transformers, imported when a batch first forms) that grows in place
    (`_grown`) instead of by concatenation; `extend` is its update, for the step's passes too."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):  # type: ignore[no-untyped-call]
        key_room: torch.Tensor | None = None
        value_room: torch.Tensor | None = None

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
                   **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            self.extend(key_states, value_states)
            assert self.keys is not None and self.values is not None
            return self.keys, self.values

        def extend(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            assert self.keys is not None and self.values is not None  # made with both (`growing`)
            self.keys, self.key_room = _grown(self.keys, key_states, self.key_room)
            self.values, self.value_room = _grown(self.values, value_states, self.value_room)

    return GrowingLayer


def growing(keys: torch.Tensor, values: torch.Tensor) -> Any:
    """A batch cache layer holding `keys` and `values` that grows in place (`_grown`)."""
    layer = _growing_layer()()
    layer.keys, layer.values, layer.is_initialized, layer.device = keys, values, True, keys.device
    return layer


def left_padded(tensor: torch.Tensor, length: int, dim: int = 2) -> torch.Tensor:
    """`tensor` with zeros before it along `dim` up to `length` (a cache layer's keys or values:
    dim 2, positions; a mask: dim 1), masked out by the caller; itself when already that long."""
    count = length - tensor.shape[dim]
    if count == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = count
    return torch.cat([tensor.new_zeros(shape), tensor], dim)


def _common_prefix(a: list[int], b: list[int], bound: int) -> int:
    """How many leading tokens `a` and `b` share, at most `bound`."""
    n = min(len(a), len(b), bound)
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
