"""Exit codes and the errors the CLI turns into one line on stderr."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """What ``chaosckpt`` exits with; documented in ``--help`` and the README."""

    PASSED = 0
    """Every trial passed."""
    FAILED = 1
    """Some trial failed: the job is not resilient to the fault."""
    USAGE = 2
    """Bad command line, scenario or configuration."""
    INTERNAL = 3
    """A bug in chaosckpt; a crash report was written."""
    INCONCLUSIVE = 4
    """No trial failed, but some verdict could not be established."""
    INTERRUPTED = 130


class UsageError(Exception):
    """Input chaosckpt cannot act on: said in one line, exit code 2, no traceback."""
