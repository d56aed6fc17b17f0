"""How near a trial comes to its floor: one bare run of a short job.

    python bench/bench_floor.py              # the plain job and one importing Lightning at the top, 2 rounds
    python bench/bench_floor.py --rounds 3 --no-heavy --no-big

Every figure is a ratio to one bare run of the same job (``python train.py``, no chaosckpt), taken in the
same run and alternated with it. The job is ``examples/robust_train.py`` (six epochs of 16 steps, a save after each); the heavy one
adds ``import lightning`` at its top (skipped, said so, when Lightning is not installed). Measured, each the
median of the rounds:

* a trial with a cold reference (``--fresh-reference``), goal <= 2.5 bare runs;
* a trial with a warm reference (the project's cache), goal <= 1.5 bare runs;
* a suite of the five one-machine scenarios, warm reference, goal <= 4 bare runs;
* what a working directory of 10,000 files and 2 GB of data adds to a warm trial (one sandbox), goal <= 1 s.

Then where a warm and a cold trial's time goes: chaosckpt's own start, each run (of which the start-up of an
interpreter with the job's imports, timed bare), the sandbox copies and what is left: scoring, reports and the
rest of chaosckpt's own work.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = ("kill9-mid-save", "enospc", "power-loss", "preemption", "eval-left-on")
"""The one-machine scenarios: every built-in one that needs neither ranks nor nodes."""
BIG_FILES, BIG_BYTES = 10_000, 2 << 30
ENV = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
CLI = [sys.executable, "-m", "chaosckpt"]


def project(root: Path, name: str, heavy: bool) -> Path:
    folder = root / name
    folder.mkdir()
    text = (REPO / "examples" / "robust_train.py").read_text()
    if heavy:
        text = "import lightning  # noqa: F401  (a heavy import at the top, as real trainers have)\n" + text
    (folder / "train.py").write_text(text)
    lines = ['command = "train.py"', "scenarios = [" + ", ".join(json.dumps(s) for s in SCENARIOS) + "]"]
    (folder / "chaosckpt.toml").write_text("\n".join(lines) + "\n")  # from the start: a source of the job's
    return folder


def timed(argv: List[str], cwd: Path) -> Tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    took = time.monotonic() - started
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} exited with status {done.returncode}:\n{done.stderr[-2000:]}")
    return took, done.stdout


def bare(folder: Path) -> float:
    shutil.rmtree(folder / "ckpt", ignore_errors=True)
    took, _ = timed([sys.executable, "train.py"], folder)
    shutil.rmtree(folder / "ckpt", ignore_errors=True)
    return took


def trial(folder: Path, fresh: bool, scenario: str = "kill9-mid-save") -> Tuple[float, Dict]:
    argv = [*CLI, "run", "train.py", "-s", scenario, "--out", "results", "--json"]
    took, out = timed(argv + (["--fresh-reference"] if fresh else []), folder)
    doc = json.loads(out)["trials"][0]
    if doc["status"] != "passed":
        sys.exit(f"the trial of {folder.name} did not pass: {doc['headline']}")
    return took, doc


def suite(folder: Path) -> float:
    return timed([*CLI, "suite", "--out", "results"], folder)[0]


def fill(folder: Path) -> None:
    """``data/``: BIG_FILES files of BIG_BYTES in all, which the job never opens."""
    data = folder / "data"
    data.mkdir()
    block = os.urandom(BIG_BYTES // BIG_FILES)
    for i in range(BIG_FILES):
        (data / f"shard-{i:05d}.bin").write_bytes(block)


def sandbox_s(folder: Path) -> float:
    """One sandbox copy of ``folder`` (what every trial makes once per run it starts from the working directory)."""
    from chaosckpt.conductor.runs import sandbox

    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        started = time.monotonic()
        sandbox.create(folder, Path(tmp) / "box", exclude=[folder / "results"])
        took = time.monotonic() - started
        sandbox.remove(Path(tmp) / "box")
    return took


def startup_s(heavy: bool) -> float:
    """The bare start-up of an interpreter with the job's imports."""
    imports = "import numpy, torch" + (", lightning" if heavy else "")
    return statistics.median(timed([sys.executable, "-c", imports], REPO)[0] for _ in range(3))


def breakdown(label: str, wall: float, doc: Dict, cli_s: float, start_s: float, box_s: float) -> str:
    runs = {r["name"]: r["duration_s"] for r in doc["runs"] if not r.get("cached")}
    boxes = 1 + ("reference" in runs)
    rest = wall - cli_s - sum(runs.values()) - boxes * box_s
    parts = [f"chaosckpt's start {cli_s:.2f}"]
    parts += [f"{name} {took:.2f}" for name, took in runs.items()]
    parts += [f"of which start-ups {len(runs)} x {start_s:.2f}", f"sandboxes {boxes} x {box_s:.3f}",
              f"scoring, reports and the rest {rest:.2f}"]
    return f"  {label} trial, {wall:.2f} s: " + ", ".join(parts)


def measure(root: Path, heavy: bool, rounds: int, big: bool) -> None:
    name = "heavy (imports lightning)" if heavy else "plain"
    folder = project(root, "heavy" if heavy else "plain", heavy)
    trial(folder, fresh=True)  # fills the cache, warms the disk
    bares, colds, warms, suites = [], [], [], []
    cold_doc = warm_doc = {}
    for _ in range(rounds):
        bares.append(bare(folder))
        took, cold_doc = trial(folder, fresh=True)
        colds.append(took)
        bares.append(bare(folder))
        took, warm_doc = trial(folder, fresh=False)
        warms.append(took)
        bares.append(bare(folder))
        suites.append(suite(folder))
    one = statistics.median(bares)
    cold, warm, whole = (statistics.median(x) for x in (colds, warms, suites))
    print(f"{name} job: one bare run {one:.2f} s (median of {len(bares)})")
    print(f"  trial, cold reference: {cold:.2f} s = {cold / one:.2f} bare runs  (goal <= 2.5)")
    print(f"  trial, warm reference: {warm:.2f} s = {warm / one:.2f} bare runs  (goal <= 1.5)")
    print(f"  suite of {len(SCENARIOS)} scenarios, warm reference: {whole:.2f} s = {whole / one:.2f} bare runs  (goal <= 4)")
    cli_s = statistics.median(timed([*CLI, "run", "--help"], folder)[0] for _ in range(3))
    start_s, box_s = startup_s(heavy), sandbox_s(folder)
    print(breakdown("cold", colds[-1], cold_doc, cli_s, start_s, box_s))
    print(breakdown("warm", warms[-1], warm_doc, cli_s, start_s, box_s))
    if big:
        fill(folder)
        trial(folder, fresh=True)
        with_data = statistics.median(trial(folder, fresh=False)[0] for _ in range(rounds))
        print(f"  warm trial with data/ of {BIG_FILES:,} files and {BIG_BYTES >> 30} GB beside the job: "
              f"{with_data:.2f} s, {with_data - warm:+.2f} s  (goal <= +1 s); one sandbox of it {sandbox_s(folder):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-heavy", action="store_true", help="leave out the job importing Lightning")
    parser.add_argument("--no-big", action="store_true", help="leave out the 2 GB, 10,000-file working directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        measure(Path(tmp), heavy=False, rounds=args.rounds, big=not args.no_big)
        if args.no_heavy:
            return
        if importlib.util.find_spec("lightning") is None:
            print("heavy job: left out, Lightning is not installed here")
            return
        measure(Path(tmp), heavy=True, rounds=args.rounds, big=False)


if __name__ == "__main__":
    main()
