"""Kept freed memory: beam search stops faulting in fresh pages for its large tensors."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.trains  # beam search in processes of its own

FAULTS_OF_A_BEAM_SEARCH = """
import resource, sys
import torch
from pipeline.core.host_memory import keep_freed_memory
from stages.shared.inference.beam import beam_search
from stages.shared.models.build import build_model

if sys.argv[1] == "keep":
    assert keep_freed_memory()
torch.manual_seed(0)
model = build_model("transformer", "tiny", {}, 8000, 8000).eval()
src = torch.randint(6, 8000, (32, 20))
search = lambda: beam_search(model, src, 4, bos_id=2, eos_id=3, pad_id=0, max_length_b=10)
search()  # the first search faults in its pages either way
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
search()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> int:
    """Minor page faults of a second beam search (32 sentences x 4 beams x 8,000 tokens: 4 MB
    a vocabulary-sized tensor) in a fresh interpreter: mallopt's settings last for the
    process, so each mode gets its own."""
    result = subprocess.run([sys.executable, "-c", FAULTS_OF_A_BEAM_SEARCH, mode],
                            capture_output=True, text=True, check=True)
    return int(result.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_kept_memory_stops_the_page_faults_of_beam_search():
    default, kept = page_faults("default"), page_faults("keep")
    assert kept * 5 < default, (kept, default)
