"""Exit codes, and the one expected failure the command reports as a line."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNKNOWN = 3
EXIT_BUSY = 4
EXIT_NO_STORE = 5
#: A command stopped by Ctrl-C (SIGINT), as shells report it (128 + 2): U2.
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A clear, expected failure: printed as one line, with its exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code
