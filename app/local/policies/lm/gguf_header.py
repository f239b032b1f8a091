"""What the model check needs of a .gguf file, read from its header in one pass: the
architecture, the parameter count (the tensor table's shapes), the chat template and the
special tokens' texts. Nothing else of the file is read: the header of SmolLM2-135M's file
parses in a fraction of a second, where transformers' config and tokenizer loading each parse
it again and build the whole vocabulary (issue 37: about a minute on a busy machine).
docs/wire-contract.md#model-verification.

The layout (GGUF v2 and v3, little-endian, as llama.cpp writes it): magic `GGUF`, version u32,
tensor count u64, key-value count u64; each key a string (u64 length, UTF-8), its type u32 and
its value; then each tensor's name, dimension count u32, dimensions u64 each, type u32, offset u64.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_FIXED = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_VERSIONS = (2, 3)
_MAX_COUNT = 1 << 28  # more entries than any real header holds: a damaged file, not a model
# The special tokens a chat template may name, and the metadata key of each one's id.
SPECIAL_TOKEN_IDS = {"bos_token": "tokenizer.ggml.bos_token_id", "eos_token": "tokenizer.ggml.eos_token_id",
                     "unk_token": "tokenizer.ggml.unknown_token_id", "pad_token": "tokenizer.ggml.padding_token_id"}
_TOKENS = "tokenizer.ggml.tokens"


class NotGguf(ValueError):
    """The file is not a GGUF model this reader understands; the message says why."""


@dataclass
class GgufHeader:
    architecture: str
    parameters: int
    chat_template: str | None
    special_tokens: dict[str, str] = field(default_factory=dict)  # bos_token → its text
    metadata: dict[str, Any] = field(default_factory=dict)  # the scalar and string values


class _Cursor:
    def __init__(self, data: Any) -> None:
        self.data, self.pos = data, 0

    def unpack(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values[0] if len(values) == 1 else values

    def string(self) -> str:
        length = self.unpack("<Q")
        if self.pos + length > len(self.data):
            raise NotGguf("a string runs past the end of the file")
        text = bytes(self.data[self.pos:self.pos + length]).decode("utf-8", errors="replace")
        self.pos += length
        return text

    def value(self, kind: int, keep: bool) -> Any:
        """One value; an array is kept only when `keep` (the token list), else skipped."""
        if kind in _FIXED:
            return self.unpack(_FIXED[kind])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise NotGguf(f"unknown metadata type {kind}")
        item, count = self.unpack("<IQ")
        if count > _MAX_COUNT:
            raise NotGguf(f"an array of {count} entries")
        if item in _FIXED and not keep:
            self.pos += count * struct.calcsize(_FIXED[item])
            return None
        if item == _STRING and not keep:  # the merges: skipped by their lengths, never decoded
            for _ in range(count):
                self.pos += 8 + struct.unpack_from("<Q", self.data, self.pos)[0]
            return None
        items = [self.value(item, keep) for _ in range(count)]
        return items if keep else None


def read_gguf_header(path: Path) -> GgufHeader:
    """The header of a .gguf file (one open, one pass), or NotGguf."""
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _parse(_Cursor(data))
    except (OSError, ValueError, struct.error) as exc:  # NotGguf is a ValueError
        raise NotGguf(str(exc) if isinstance(exc, NotGguf) else f"{type(exc).__name__}: {exc}") from None


def _parse(cursor: _Cursor) -> GgufHeader:
    if bytes(cursor.data[:4]) != b"GGUF":
        raise NotGguf("it does not begin with the GGUF magic bytes")
    cursor.pos = 4
    version, tensor_count, kv_count = cursor.unpack("<IQQ")
    if version not in _VERSIONS:
        raise NotGguf(f"GGUF version {version} (this reader knows versions 2 and 3)")
    if max(tensor_count, kv_count) > _MAX_COUNT:
        raise NotGguf("its counts are not those of a model")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = cursor.string()
        value = cursor.value(cursor.unpack("<I"), keep=key == _TOKENS)
        if value is not None:
            metadata[key] = value
    parameters = 0
    for _ in range(tensor_count):
        cursor.string()  # the tensor's name
        dims = cursor.unpack("<I")
        size = 1
        for _ in range(dims):
            size *= cursor.unpack("<Q")
        cursor.pos += 12  # its type and offset
        parameters += size
    architecture = metadata.get("general.architecture")
    if not isinstance(architecture, str) or not architecture:
        raise NotGguf("it names no general.architecture")
    tokens = metadata.pop(_TOKENS, None) or []
    special = {name: tokens[index] for name, key in SPECIAL_TOKEN_IDS.items()
               if isinstance(index := metadata.get(key), int) and 0 <= index < len(tokens)}
    template = metadata.get("tokenizer.chat_template")
    return GgufHeader(architecture, parameters, template if isinstance(template, str) and template else None,
                      special, metadata)
