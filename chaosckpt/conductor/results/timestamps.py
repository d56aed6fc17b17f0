"""Timestamps in results and reports: ISO 8601 with the local UTC offset, as CI tools parse them."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

FOLDER_STAMP = re.compile(r"^(\d{8}-\d{6})-")
"""How ``invocation.results_dir`` names a results folder: ``20261201-224939-enospc``."""


def now() -> str:
    """This moment, e.g. ``2026-12-01T22:49:39+00:00``."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


def normalized(text: str) -> str:
    """A stored timestamp in ISO 8601; older suites stored ``2026-12-01 22:49:39`` (local time)."""
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        return ""
    return (stamp if stamp.tzinfo else stamp.astimezone()).isoformat(timespec="seconds")


def of_folder(folder: Path) -> str:
    """When a ``chaosckpt run`` results folder was made: from its name, else from its result file's time."""
    match = FOLDER_STAMP.match(folder.name)
    if match:
        return datetime.strptime(match.group(1), "%Y%m%d-%H%M%S").astimezone().isoformat(timespec="seconds")
    result = folder / "result.json"
    if result.is_file():
        return datetime.fromtimestamp(result.stat().st_mtime).astimezone().isoformat(timespec="seconds")
    return ""
