"""The console log lines and messages go to (stderr), apart from output.py so that the
command line imports it without what the commands load."""

from __future__ import annotations

from rich.console import Console

console = Console(stderr=True)
