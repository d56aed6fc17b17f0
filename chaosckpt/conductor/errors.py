"""Exit codes and the errors the CLI turns into one line on stderr."""

from __future__ import annotations

import enum
import json
import sqlite3
import sys
import unicodedata
from typing import Any, Callable, Iterable


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


def shown(value: Any) -> str:
    """A value as a user wrote it in TOML or on the command line (``"abc"``, ``true``, ``[1, 2]``), not as
    Python's repr would show it (``'abc'``, ``True``, ``PosixPath(...)``)."""
    return json.dumps(value, default=str, ensure_ascii=False)


_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
"""Unicode categories escaped: control, format (bidi overrides and isolates, zero-width marks), surrogate
(undecodable bytes of a file name), private, unassigned, line and paragraph separators."""


def printable(text: str) -> str:
    """One line of text as people may safely read it, for every human-facing output: a name is data and may hold
    a newline (a second, forged ``OK`` line) or a bidi control (text displayed in another order than it reads).
    Each such character is written as an escape (``\\n``, ``\\u202e``); other characters, accented letters and
    scripts included, stay as they are."""
    if text.isprintable():
        return text
    return "".join(_escaped(c) if unicodedata.category(c) in _HIDDEN else c for c in text)


def _escaped(char: str) -> str:
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
                                else f"\\U{code:08x}")


EXIT_CODES = """\b
Exit codes:
  0  every trial passed
  1  some trial failed: the job is not resilient to the fault
  2  usage error (bad command line, scenario file or parameter)
  3  internal error in chaosckpt (a crash report file is written)
  4  inconclusive: no trial failed, but a verdict could not be established
  130, 143, 129  interrupted by Ctrl-C, SIGTERM or SIGHUP (job trees killed)
"""
READING_EXIT_CODES = """\b
Exit codes:
  0  done, whatever the verdicts it read (run, suite and report exit with those)
  2  usage error (bad command line, missing or unreadable results)
  3  internal error in chaosckpt (a crash report file is written)
  130, 143, 129  interrupted by Ctrl-C, SIGTERM or SIGHUP
"""
"""The exit codes of ``history``, which reads stored results and runs no trial (``report`` has its own)."""


def exit_code(statuses: Iterable[str]) -> ExitCode:
    """What a whole invocation exits with, from its trials' statuses: a failure outranks the inconclusive."""
    statuses = list(statuses)
    if "failed" in statuses:
        return ExitCode.FAILED
    if "inconclusive" in statuses:
        return ExitCode.INCONCLUSIVE
    return ExitCode.PASSED


def keep_going(what: str, write: Callable[[], None]) -> None:
    """Write ``what`` (reports, the history); trouble with it is a warning on stderr, so the verdicts and the exit
    code still come out."""
    try:
        write()
    except (OSError, sqlite3.Error) as exc:
        print(f"chaosckpt: warning: could not write {what}: {exc}", file=sys.stderr, flush=True)
