"""The history of suites in the project's ``.chaosckpt/history.sqlite``: one row per suite, one per trial.

Each finished suite appends its trials in one transaction, so a crash leaves the
database without that suite, never with part of it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, List, Optional, TypeVar

from chaosckpt.conductor.results import atomic
from chaosckpt.conductor.results.stored import StoredTrial
from chaosckpt.conductor.runs import cache

FILE = "history.sqlite"
T = TypeVar("T")
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


DAMAGED = (11, 26)
"""SQLite's SQLITE_CORRUPT and SQLITE_NOTADB: the file is not a database any more."""


_COLUMNS = {"suites": ["id", "started", "folder", "command", "chaosckpt"],
            "trials": ["suite", "trial", "scenario", "params", "status", "lost_steps", "first_divergent_step", "headline"]}


class _OtherSchema(sqlite3.DatabaseError):
    """A database whose tables are not the history's: another program's file, or an older layout."""


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path)
    try:
        db.executescript(SCHEMA)
        for table, columns in _COLUMNS.items():
            found = [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            if found != columns:
                raise _OtherSchema(f"its {table} table has the columns {', '.join(found)}, not the history's")
    except BaseException:
        db.close()
        raise
    return db


def _transaction(path: Path, work: Callable[[sqlite3.Connection], T]) -> T:
    """``work`` in one transaction on the history; a damaged file is moved aside, with a warning, and ``work``
    done again on a new history in its place."""
    for attempt in range(2):
        try:
            db = _connect(path)
            try:
                with db:
                    return work(db)
            finally:
                db.close()
        except sqlite3.DatabaseError as exc:
            if attempt or not (isinstance(exc, _OtherSchema) or getattr(exc, "sqlite_errorcode", None) in DAMAGED):
                raise
            atomic.set_aside(path, str(exc), "and started a new history")
    raise AssertionError("unreachable")


def path_of(workdir: Path) -> Path:
    return cache.project_folder(workdir) / FILE


def record(workdir: Path, started: str, folder: Path, command: str, version: str, trials: Iterable[StoredTrial]) -> None:
    """Append a finished suite and its trials (those that ran), once: a suite already recorded is left as it is."""
    rows = [(t.id, t.trial.scenario, json.dumps(t.trial.params.get("trigger", {}), sort_keys=True), t.trial.status,
             t.trial.lost_steps, t.trial.first_divergent_step, t.trial.headline) for t in trials if t.trial is not None]

    def append(db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")
        if db.execute("SELECT 1 FROM suites WHERE folder = ?", (str(folder),)).fetchone():
            return
        suite = db.execute("INSERT INTO suites (started, folder, command, chaosckpt) VALUES (?, ?, ?, ?)",
                           (started, str(folder), command, version)).lastrowid
        db.executemany("INSERT INTO trials VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [(suite, *row) for row in rows])

    _transaction(path_of(workdir), append)


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
    rows = _transaction(path, lambda db: db.execute(
        """SELECT t.scenario, s.id, s.started, SUM(t.status = 'passed'), COUNT(*), MAX(t.lost_steps),
                  MIN(t.first_divergent_step)
           FROM trials t JOIN suites s ON s.id = t.suite
           WHERE ? IS NULL OR t.scenario = ?
           GROUP BY t.scenario, s.id ORDER BY t.scenario, s.id""",
        (scenario, scenario),
    ).fetchall())
    out: dict = {}
    for name, _, started, passed, total, lost, divergent in rows:
        out.setdefault(name, []).append(Point(started, passed, total, lost, divergent))
    return [Trend(name, points[-last:]) for name, points in out.items()]


@dataclass
class LastTime:
    """The newest recorded suite or run of a job: when it started, and the ids of its trials that did not pass."""

    started: str
    folder: str
    failed: List[str]


def last_time(workdir: Path, command: str) -> Optional[LastTime]:
    """What the newest suite (or run) of ``command`` recorded in ``workdir``'s history left failed or inconclusive;
    None when the history holds none (``suite --lf`` and ``--ff`` then run every trial, as pytest's do)."""
    path = Path(workdir) / cache.FOLDER / FILE
    if not path.is_file():
        return None

    def newest(db: sqlite3.Connection) -> Optional[LastTime]:
        row = db.execute("SELECT id, started, folder FROM suites WHERE command = ? ORDER BY id DESC LIMIT 1",
                         (command,)).fetchone()
        if row is None:
            return None
        failed = [t for (t,) in db.execute("SELECT trial FROM trials WHERE suite = ? AND status != 'passed' "
                                           "ORDER BY rowid", (row[0],))]
        return LastTime(row[1], row[2], failed)

    return _transaction(path, newest)
