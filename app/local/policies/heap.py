"""Memory a policy freed, given back to the system: a collection, then glibc's `malloc_trim(0)`.

torch's CPU tensors come from the C heap; once freed, glibc keeps most of those pages in the
process (its arenas, one per thread that allocated) for reuse, so the backend's RSS stays at the
job's peak after a job ends. Measured with SmolLM2-135M (LoRA) after a job's policy is closed:
1,971 MB held; 1,143 MB once the policy is collected; 629 MB once trimmed
(docs/embedded-policy.md#memory-of-a-step). Called after a model loads, after each update and
when a job ends. `bound_the_heap` (before a model loads) keeps large tensors out of the heap
and the arenas few. Elsewhere than glibc (musl, macOS, Windows) only the collection runs.
"""

from __future__ import annotations

import ctypes
import gc
import sys
from functools import cache
from typing import Any


@cache
def _libc() -> Any:
    """glibc, when this process runs on it; None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:  # the symbols already loaded (no ldconfig search): glibc's, when this Python runs on it
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


def release_freed_memory(collect: bool = True) -> bool:
    """Collect what is unreachable (a closed policy's model, its trainer and their reference
    cycles) when `collect`, then return the heap's free pages to the system. True when glibc
    trimmed."""
    if collect:
        gc.collect()
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


# mallopt's parameters (glibc's malloc.h) and the values the lm policy sets before it loads.
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD_BYTES = 1 << 20  # a tensor this large or larger is its own mapping, unmapped when freed
ARENA_MAX = 2  # the turns' threads and the training thread share two arenas, not one each


def bound_the_heap() -> bool:
    """glibc's allocator set for torch's tensors on CPU: a fixed mmap threshold (glibc raises its
    own up to 32 MB after each large free, and activations freed below it stay in the heap,
    fragmented, for the job's life) and at most ARENA_MAX arenas (free memory in one thread's arena
    is of no use to another's). Set once, before the model loads; True when glibc took them."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(libc.mallopt(M_ARENA_MAX, ARENA_MAX))
