"""chaosckpt's overhead, as ratios measured in one run: agent on / agent off.

    python bench/run_bench.py            # all five measurements
    python bench/run_bench.py --quick    # fewer repetitions

(a) optimizer-step time with the agent recording / without (goal <= 1.02);
(b) torch.save(path) throughput of a 400 MB state dict through the agent's
    interposed writer / plain (goal >= 0.95);
(c) process start-up: the agent's cost in ms per process, in one that imports
    torch and in one that never does (goal ~20 ms);
(d) a checkpoint's other writers (open().write of 400 MB, then shutil.copyfile
    of it) counted by the agent / plain (goal >= 0.95);
(e) training steps while a saver thread writes the checkpoint the training thread
    serialized every 10 steps (an asynchronous save), agent / plain (goal <= 1.05).
Runs alternate between the two configurations so drift hits both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from chaosckpt import protocol  # noqa: E402
from chaosckpt.conductor.runs.launcher import BOOT_DIR  # noqa: E402


def job(args, agent: bool, run_dir: str) -> dict:
    env = dict(os.environ)
    env.pop(protocol.ENV_RUN_DIR, None)
    if agent:
        env[protocol.ENV_RUN_DIR] = run_dir
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BOOT_DIR), env.get("PYTHONPATH", "")]))
    start = time.perf_counter()
    out = subprocess.run([sys.executable, str(HERE / "workload.py"), *args], env=env, check=True,
                         capture_output=True, text=True).stdout
    result = json.loads(out)
    result["wall_s"] = time.perf_counter() - start
    return result


def paired(args, rounds: int, key: str, run_dir: str):
    on, off = [], []
    for _ in range(rounds):
        off.append(job(args, False, run_dir)[key])
        on.append(job(args, True, run_dir)[key])
    return statistics.median(on), statistics.median(off)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    opts = parser.parse_args()
    rounds = 3 if opts.quick else 5
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = os.path.join(tmp, "events")
        os.mkdir(run_dir)

        on, off = paired(["step", "40" if opts.quick else "100"], rounds, "step_s", run_dir)
        params = job(["step", "1"], False, run_dir)["params"]
        print(f"(a) step time, {params / 1e6:.1f}M-parameter MLP, Adam, 1 thread: "
              f"agent {on * 1e3:.2f} ms / plain {off * 1e3:.2f} ms = {on / off:.3f}  (goal <= 1.02)")

        on, off = paired(["save", "3", tmp], rounds, "save_s", run_dir)
        mb = 400
        print(f"(b) torch.save(path) of a {mb} MB state dict: interposed {mb / on:.0f} MB/s / plain "
              f"{mb / off:.0f} MB/s = {off / on:.3f} of the throughput  (goal >= 0.95)")

        for what, args in (("imports torch", ["import"]), ("never imports torch", ["bare"])):
            on, off = paired(args, rounds * 4, "wall_s", run_dir)
            print(f"(c) start-up of a process that {what}: agent {on * 1e3:.0f} ms, plain {off * 1e3:.0f} ms, "
                  f"cost {(on - off) * 1e3:.1f} ms per process  (goal ~20 ms)")

        on, off = paired(["writers", "3", tmp], rounds, "writers_s", run_dir)
        print(f"(d) open().write + shutil.copyfile of 400 MB into a checkpoint: counted {2 * mb / on:.0f} MB/s / "
              f"plain {2 * mb / off:.0f} MB/s = {off / on:.3f} of the throughput  (goal >= 0.95)")

        on, off = paired(["async", "60" if opts.quick else "150", tmp], rounds, "async_s", run_dir)
        print(f"(e) steps with a saver thread writing every 10th step's checkpoint: agent {on * 1e3:.2f} ms / "
              f"plain {off * 1e3:.2f} ms per step = {on / off:.3f}  (goal <= 1.05)")


if __name__ == "__main__":
    main()
