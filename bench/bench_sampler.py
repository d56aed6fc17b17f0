"""Cost of sampler recording on an epoch of 1M indices, as a ratio measured in one process.

    python bench/bench_sampler.py            # 5 paired epochs
    python bench/bench_sampler.py --quick    # 3 paired epochs

(a) a DataLoader epoch over 1M in-memory rows (batch 256, DistributedSampler
    with one replica, no workers) with the agent's sampler recording on / off,
    alternating which goes first so that drift hits both alike; times are the
    process's CPU time, which other load on the machine disturbs least, and
    the fastest epoch of each is compared (goal <= 1.01);
(b) the recording's own cost per 1M-index pass: flattening the batches and
    encoding them (order CRC, bitmap, compression) into the event.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402
from torch.utils.data import dataloader  # noqa: E402

from chaosckpt.agent import sampler  # noqa: E402
from chaosckpt.agent.channel import EventWriter  # noqa: E402
from chaosckpt.agent.recorder import Recorder  # noqa: E402

ROWS = 1_000_000


def epoch_s(loader: DataLoader) -> float:
    start = time.process_time()
    for _ in loader:
        pass
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    opts = parser.parse_args()
    rounds = 3 if opts.quick else 5
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(ROWS, 16), torch.randn(ROWS, 1))
    dist_sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=256, sampler=dist_sampler)
    base = dataloader._BaseDataLoaderIter
    plain = base._next_index
    with tempfile.TemporaryDirectory() as tmp:
        rec = Recorder(EventWriter(tmp, 0), 0, None)
        sampler.install(rec)
        recording = base._next_index
        on, off = [], []
        for r in range(rounds):
            dist_sampler.set_epoch(r)
            for hook, times in ((plain, off), (recording, on))[:: 1 if r % 2 else -1]:
                base._next_index = hook
                times.append(epoch_s(loader))
        base._next_index = plain
        events = sorted(Path(tmp).glob("events.*.jsonl"))
        line_bytes = max(len(line) for line in events[0].read_bytes().splitlines())

    indices = torch.randperm(ROWS).tolist()
    batches = [indices[i:i + 256] for i in range(0, ROWS, 256)]
    costs = []
    for _ in range(rounds):
        start = time.process_time()
        sampler.encode(sampler._flatten(batches))
        costs.append(time.process_time() - start)

    m_on, m_off = min(on), min(off)
    print(f"(a) DataLoader epoch of {ROWS // 1000}k indices, batch 256, 1 thread, CPU time, fastest of {rounds}: recording "
          f"{m_on:.3f} s / plain {m_off:.3f} s = {m_on / m_off:.4f}  (goal <= 1.01; medians "
          f"{statistics.median(on) / statistics.median(off):.4f})")
    print(f"(b) recording one {ROWS // 1000}k-index pass: {1e3 * statistics.median(costs):.1f} ms "
          f"({100 * statistics.median(costs) / m_off:.2f}% of the plain epoch); its event line {line_bytes / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
