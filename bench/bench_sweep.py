"""Time per crash state of the crash-point sweep, on a save of about 200 operations.

    python bench/bench_sweep.py

Runs one real job that saves a 100-tensor state dict with the durability journal
on, then replays the journal: every crash point's disk state under the ``none``
model (each write makes a new state), materialized, load-checked and grouped into
classes (a torn file's states are one class, so a sweep resumes few). Goal: at
most 50 ms a state.
"""

from __future__ import annotations

import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chaosckpt import protocol  # noqa: E402
from chaosckpt.conductor.disk import sweep  # noqa: E402
from chaosckpt.conductor.disk import crash
from chaosckpt.conductor.disk.loadcheck import LoadChecker  # noqa: E402
from chaosckpt.conductor.runs import launcher
from chaosckpt.conductor.runs.runlog import RunLog  # noqa: E402

JOB = textwrap.dedent(
    """
    import torch
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(1, 2)).sum().backward()
    opt.step()
    torch.save({f"w{i}": torch.randn(16384) for i in range(100)}, "ckpt/state.pt")
    """
)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp, "work")
        (work / "ckpt").mkdir(parents=True)
        (work / "job.py").write_text(JOB)
        root = str((work / "ckpt").resolve())
        initial = crash.Disk.scan([root])
        fault = protocol.fault_spec("halt", 1, after_save=True, track=[root])
        result = launcher.launch(launcher.RunSpec("sweep", [sys.executable, "job.py"], work, Path(tmp, "run"), 300, fault))
        log = RunLog.read(result.events_dir)
        save = log.processes[0].saves[0]
        ops = log.ops()
        checker = LoadChecker()
        start = time.perf_counter()
        sw = sweep.explore(initial, ops, lambda op: op["n"] > (save.op or 0), "none", lambda p: p)
        explored = time.perf_counter()
        checker.check([str(work / "job.py")])  # start the worker outside the timing: one torch import per sweep
        checked_from = time.perf_counter()
        sweep.classify(sw, sweep.check_states(sw, [root], Path(tmp, "states"), checker))
        done = time.perf_counter()
        checker.close()
        window = len(sw.points) - 1
        per_state = ((explored - start) + (done - checked_from)) / len(sw.states)
        print(f"save of {window} operations ({save.bytes / 1e6:.1f} MB): {len(sw.points)} crash points, "
              f"{len(sw.states)} distinct states in {len(sw.representatives)} classes (one resume each); replay {1e3 * (explored - start):.0f} ms, "
              f"materialize + load check {1e3 * (done - checked_from):.0f} ms; "
              f"{1e3 * per_state:.1f} ms per state  (goal <= 50 ms)")


if __name__ == "__main__":
    main()
