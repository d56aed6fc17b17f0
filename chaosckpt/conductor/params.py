"""A scenario parameter as the command line writes it, ``KEY=VALUE`` (``-p save=3``, ``-p model=strict``): read into
a value, and written back the way a user types it (replay lines, error messages)."""

from __future__ import annotations

import json
import sys
from typing import Any, Tuple

from chaosckpt.conductor.errors import UsageError, shown

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def param_text(key: str, value: Any) -> str:
    """``KEY=VALUE`` as a user types it, which ``parse_param`` reads back to the same value: a string bare where
    TOML would not read it as something else (``model=strict``), quoted where it would (``signal="15"``)."""
    if isinstance(value, str) and value and parse_param(f"{key}={value}")[1] == value and "\n" not in value:
        return f"{key}={value}"
    return f"{key}={json.dumps(value)}"


def parse_param(item: str) -> Tuple[str, Any]:
    """``KEY=VALUE`` from the command line, the value read as a TOML literal (else a string)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"--param {shown(item)}: expected KEY=VALUE, e.g. --param save=3")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    except RecursionError:
        raise UsageError(f"--param {key.strip()}: the value is nested too deeply; give a number or a string") from None
    return key.strip(), value
