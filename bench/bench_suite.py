"""A suite's wall time against the bare runs it needs (goal <= 1.15).

    python bench/bench_suite.py            # five kill9-mid-save trials, -j 1, cold reference cache
    python bench/bench_suite.py --jobs 2   # the same suite with two trials at a time

A five-trial suite of examples/robust_train.py (--epochs 3, three saves) needs one
reference run and, per trial, a faulted run up to its save and a resumed run from the
save before it. Those are timed bare, without chaosckpt: the faulted run is the job
stopped when it reports the interrupted save done; the resumed run is the job restarted
from the previous save's checkpoint, left by another bare run stopped there. The ratio is
the suite's wall time (chaosckpt's start, sandboxes, agent, scoring, reports, history)
divided by their sum.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EPOCHS = "3"
TRIALS = [(1, 0.5), (2, 0.25), (2, 0.75), (3, 0.5), (3, 0.9)]
"""(save, fraction) of the five trials; the example saves once per epoch."""


def project(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir()
    shutil.copy(REPO / "examples" / "robust_train.py", folder / "train.py")
    return folder


def bare(folder: Path, stop_after_saves: int | None = None) -> float:
    """Run the job bare in ``folder``; stop it once it has reported ``stop_after_saves`` saves. Seconds taken."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "train.py", "--epochs", EPOCHS], cwd=folder, stdout=subprocess.PIPE, text=True)
    saves = 0
    for line in proc.stdout:
        saves += line.startswith("epoch ")
        if stop_after_saves is not None and saves >= stop_after_saves:
            proc.kill()
            break
    proc.wait()
    return time.monotonic() - started


def bare_total(root: Path) -> float:
    total = bare(project(root, "reference"))
    for i, (save, _) in enumerate(TRIALS):
        total += bare(project(root, f"faulted-{i}"), stop_after_saves=save)
        resumed = project(root, f"resume-{i}")
        if save > 1:
            bare(resumed, stop_after_saves=save - 1)  # leaves the previous save's checkpoint: not timed
        total += bare(resumed)
    return total


def suite_wall(root: Path, jobs: int) -> float:
    folder = project(root, "suite")
    entries = "".join(f'[[scenarios]]\nscenario = "kill9-mid-save"\nparams = {{ save = {s}, fraction = {f} }}\n' for s, f in TRIALS)
    (folder / "chaosckpt.toml").write_text(f'command = "train.py --epochs {EPOCHS}"\njobs = {jobs}\n{entries}')
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "chaosckpt", "suite"], cwd=folder, capture_output=True, text=True)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"the suite did not pass (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1, help="trials the suite runs at a time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chaosckpt-bench-") as tmp:
        root = Path(tmp)
        bare_s = bare_total(root)
        suite_s = suite_wall(root, args.jobs)
    print(f"five-trial suite, -j {args.jobs}, cold reference cache: suite {suite_s:.1f} s / bare runs {bare_s:.1f} s "
          f"= {suite_s / bare_s:.3f}  (goal <= 1.15)")


if __name__ == "__main__":
    main()
