"""Errors that cross module boundaries inside the daemon (raised by backends, caught by the server/CLI).

This module imports nothing from the daemon, so any daemon module may import it.
"""

from __future__ import annotations


class StartError(RuntimeError):
    """Startup failed; ``code`` is the process exit status (1 failure, 2 configuration error)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code
