"""The history of suites in the project's ``.chaosckpt/history.sqlite``: one row per suite, one per trial.

Each finished suite appends its trials in one transaction, so a crash leaves the
database without that suite, never with part of it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional

from chaosckpt.conductor import cache
from chaosckpt.conductor.reports.stored import StoredTrial

FILE = "history.sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS suites (
    id INTEGER PRIMARY KEY,
    started TEXT NOT NULL,
    folder TEXT NOT NULL,
    command TEXT NOT NULL,
    chaosckpt TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS trials (
    suite INTEGER NOT NULL REFERENCES suites(id),
    trial TEXT NOT NULL,
    scenario TEXT NOT NULL,
    params TEXT NOT NULL,
    status TEXT NOT NULL,
    lost_steps INTEGER,
    first_divergent_step INTEGER,
    headline TEXT NOT NULL
);
"""


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    return db


def path_of(workdir: Path) -> Path:
    return cache.project_folder(workdir) / FILE


def record(workdir: Path, started: str, folder: Path, command: str, version: str, trials: Iterable[StoredTrial]) -> None:
    """Append a finished suite and its trials (those that ran)."""
    with _connect(path_of(workdir)) as db:
        suite = db.execute("INSERT INTO suites (started, folder, command, chaosckpt) VALUES (?, ?, ?, ?)",
                           (started, str(folder), command, version)).lastrowid
        db.executemany(
            "INSERT INTO trials VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(suite, t.id, t.trial.scenario, json.dumps(t.trial.params.get("trigger", {}), sort_keys=True), t.trial.status,
              t.trial.lost_steps, t.trial.first_divergent_step, t.trial.headline) for t in trials if t.trial is not None],
        )


@dataclass
class Point:
    """One suite's trials of one scenario."""

    started: str
    passed: int
    total: int
    max_lost_steps: Optional[int]
    first_divergent_step: Optional[int]


@dataclass
class Trend:
    """A scenario over time: its pass rate and each suite's figures, oldest first."""

    scenario: str
    points: List[Point]

    @property
    def passed(self) -> int:
        return sum(p.passed for p in self.points)

    @property
    def total(self) -> int:
        return sum(p.total for p in self.points)


def trends(workdir: Path, scenario: Optional[str] = None, last: int = 20) -> List[Trend]:
    """Per scenario, the ``last`` suites that ran it."""
    path = Path(workdir) / cache.FOLDER / FILE
    if not path.is_file():
        return []
    with _connect(path) as db:
        rows = db.execute(
            """SELECT t.scenario, s.id, s.started, SUM(t.status = 'passed'), COUNT(*), MAX(t.lost_steps),
                      MIN(t.first_divergent_step)
               FROM trials t JOIN suites s ON s.id = t.suite
               WHERE ? IS NULL OR t.scenario = ?
               GROUP BY t.scenario, s.id ORDER BY t.scenario, s.id""",
            (scenario, scenario),
        ).fetchall()
    out: dict = {}
    for name, _, started, passed, total, lost, divergent in rows:
        out.setdefault(name, []).append(Point(started, passed, total, lost, divergent))
    return [Trend(name, points[-last:]) for name, points in out.items()]
