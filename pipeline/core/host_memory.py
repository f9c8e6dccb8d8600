"""Keeping freed host memory in the process, so that large tensors stop costing page faults.

glibc's malloc gives a block above its mmap threshold a fresh mapping from the kernel
and unmaps it again on free; it also hands the top of its heap back once more than the
trim threshold lies free there. Either way the next tensor of that size starts on
pages the kernel has not mapped, and the first write to each 4 KiB page faults. Beam
search allocates several (rows x vocabulary) tensors a step: 10 MB each for 64
sentences x 4 beams x 10,000 tokens, 2,500 pages each. Raising both thresholds keeps
such blocks in the heap for the next step, where glibc's own adaptive threshold did
not: translating 500 sentences (beam 4, batches of 64, one thread, an AMD EPYC) took
3 thousand minor page faults instead of 93-137 thousand, and no system time instead
of 0.4 s of 6 s. CTranslate2 keeps its buffers in a caching allocator for the same
reason.

The cost is memory the process keeps after a peak (at most ``trim_threshold`` above
what it uses), so only processes that translate call this.
"""

from __future__ import annotations

import ctypes
import sys

# mallopt's parameter numbers, from glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's upper bound for M_MMAP_THRESHOLD on 64-bit systems (HEAP_MAX_SIZE / 2).
LARGEST_MMAP_THRESHOLD = 32 << 20


def keep_freed_memory(trim_threshold: int = 256 << 20) -> bool:
    """Serve blocks up to 32 MiB from the heap and keep up to ``trim_threshold`` bytes of
    it free for reuse. True when glibc took both settings; False elsewhere (macOS, musl),
    where nothing changes."""
    if not sys.platform.startswith("linux"):
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # glibc's; musl has none
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, LARGEST_MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, trim_threshold))
