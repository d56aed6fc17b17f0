"""The one JSON envelope every ``--json`` output shares: ``{"format": N, "chaosckpt": VERSION, ...}``.

``format`` changes only when a field is removed or changes meaning; fields may be added within a format.
A JSON Schema of each command's document ships in ``chaosckpt/conductor/results/schemas/<command>.schema.json``.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Dict

FORMAT = 1
COMMANDS = ("run", "suite", "audit", "history", "scenarios")


def envelope(**payload: Any) -> Dict[str, Any]:
    """A document with the envelope's fields first, then ``payload``."""
    from chaosckpt import __version__

    return {"format": FORMAT, "chaosckpt": __version__, **payload}


def schema(command: str) -> Dict[str, Any]:
    """The JSON Schema of ``chaosckpt COMMAND --json``'s document."""
    if command not in COMMANDS:
        raise ValueError(f"no schema for {command!r}; commands with --json: {', '.join(COMMANDS)}")
    loaded: Dict[str, Any] = json.loads(resources.files("chaosckpt.conductor.results").joinpath("schemas", f"{command}.schema.json").read_text())
    return loaded
