"""Sampler recording in the agent, and the coverage, order and per-rank checks on what it records."""

from __future__ import annotations

import gc
import json
import zlib
from array import array

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset, dataloader

from chaosckpt import protocol
from chaosckpt.agent import sampler
from chaosckpt.conductor.runs.runlog import ProcessLog, RunLog
from chaosckpt.conductor.trial import coverage, ranks


class FakeRecorder:
    """What ``sampler.install`` needs of the recorder: its rank, step count and an event sink."""

    def __init__(self, rank=0):
        self.rank = rank
        self.step = 0
        self.enabled = True
        self.events = []
        self.batches = 0
        self.drawn = []

    def on_batch(self):
        self.batches += 1

    def on_indices(self, crc):
        self.drawn.append(crc)

    def emit(self, kind, **fields):
        self.events.append({"t": kind, **json.loads(json.dumps(fields))})


@pytest.fixture
def rec(monkeypatch):
    monkeypatch.setattr(dataloader._BaseDataLoaderIter, "_next_index", dataloader._BaseDataLoaderIter._next_index)
    monkeypatch.setattr(DistributedSampler, "set_epoch", DistributedSampler.set_epoch)
    monkeypatch.delenv(protocol.ENV_SAMPLER_SKEW, raising=False)
    recorder = FakeRecorder()
    sampler.install(recorder)
    return recorder


def test_each_pass_records_epoch_and_indices_in_order(rec):
    data = TensorDataset(torch.arange(8.0))
    dist_sampler = DistributedSampler(data, num_replicas=2, rank=0, shuffle=True)
    loader = DataLoader(data, batch_size=2, sampler=dist_sampler)
    for _ in range(2):
        list(loader)
    dist_sampler.set_epoch(1)
    rec.step = 8
    list(loader)
    orders = [(e["epoch"], e["step"], e["indices"]) for e in rec.events]
    assert orders == [(0, 0, [4, 7, 2, 1]), (0, 0, [4, 7, 2, 1]), (1, 8, [5, 2, 7, 1])]
    assert rec.batches == 3 * (2 + 1)  # the recorder hears of every batch (and each pass's end)
    batch_crcs = [f"{zlib.crc32(array('q', rows)):08x}" for rows in ([4, 7], [2, 1], [4, 7], [2, 1], [5, 2], [7, 1])]
    assert rec.drawn == batch_crcs  # and of each batch's indices
    first = rec.events[0]
    assert (first["sampler"], first["size"], first["replicas"], first["srank"], first["shuffle"]) == (
        "DistributedSampler", 8, 2, 0, True)
    assert first["complete"] is True and first["crc"] == rec.events[1]["crc"] != rec.events[2]["crc"]


def test_large_pass_is_a_bitmap_with_repeats_and_abandoned_pass_is_marked(rec):
    data = TensorDataset(torch.arange(5000.0))
    list(DataLoader(data, batch_size=64, shuffle=True))
    (big,) = rec.events
    assert big["n"] == 5000 and "indices" not in big and big["dups"] == {}
    assert coverage.decode(big).bits == (1 << 5000) - 1
    it = iter(DataLoader(data, batch_size=100))
    next(it)
    del it
    gc.collect()
    assert rec.events[-1]["complete"] is False and rec.events[-1]["n"] == 100


def test_batches_packed_along_the_way_record_the_same_pass(rec, monkeypatch):
    data = TensorDataset(torch.arange(3000.0))
    order = list(range(3000))
    monkeypatch.setattr(sampler, "FLUSH", 3)
    list(DataLoader(data, batch_size=64))
    (event,) = rec.events
    assert event["n"] == 3000 and event["crc"] == sampler.encode(array("q", order))["crc"]
    assert event["head"] == order[:8]


def test_encode_counts_repeats_and_keeps_the_order_crc():
    indices = array("q", [5] * 1500 + list(range(1500)))
    fields = sampler.encode(indices)
    assert fields["n"] == 3000 and fields["dups"] == {"5": 1500}
    assert fields["head"] == [5] * 8
    reversed_crc = sampler.encode(array("q", reversed(indices)))["crc"]
    assert reversed_crc != fields["crc"]
    decoded = coverage.decode({"rank": 0, "bits": fields["bits"], "dups": fields["dups"], "n": 3000})
    assert decoded.bits == (1 << 1500) - 1 and decoded.extra == {5: 1500}


def test_skew_offsets_one_rank_and_reset_restarts_every_rank(rec, monkeypatch):
    data = TensorDataset(torch.arange(8.0))
    s = DistributedSampler(data, num_replicas=2, rank=1)
    monkeypatch.setenv(protocol.ENV_SAMPLER_SKEW, json.dumps({"variant": "offset", "offset": 2, "rank": 0}))
    sampler.install_skew(1)
    s.set_epoch(3)
    assert s.epoch == 3  # another rank's skew
    sampler.install_skew(0)
    s.set_epoch(3)
    assert s.epoch == 5
    monkeypatch.setattr(DistributedSampler, "set_epoch", DistributedSampler.set_epoch.__chaosckpt_original__)
    monkeypatch.setenv(protocol.ENV_SAMPLER_SKEW, json.dumps({"variant": "reset"}))
    sampler.install_skew(1)
    s.set_epoch(3)
    first = s.epoch
    s.set_epoch(4)
    assert (first, s.epoch) == (0, 1)


def _pass(rank, indices, epoch=0, step=0, size=8, replicas=2):
    fields = sampler.encode(array("q", indices))
    return {"t": "sampler", "rank": rank, "sampler": "DistributedSampler", "size": size, "replicas": replicas,
            "srank": rank, "shuffle": True, "epoch": epoch, "step": step, "complete": True, **fields}


def _run(*per_rank):
    return RunLog([ProcessLog(pid=100 + r, rank=r, passes=passes) for r, passes in enumerate(per_rank)])


def test_a_partition_with_distributed_sampler_padding_is_clean():
    data = list(range(10))
    parts = [DistributedSampler(data, num_replicas=4, rank=r, shuffle=True) for r in range(4)]
    run = _run(*[[_pass(r, list(s), size=10, replicas=4)] for r, s in enumerate(parts)])
    assert coverage.partition(run, "resumed run") == []


def test_ranks_at_different_epochs_overlap_and_miss_rows():
    data = list(range(64))
    r0 = DistributedSampler(data, num_replicas=2, rank=0)
    r1 = DistributedSampler(data, num_replicas=2, rank=1)
    r0.set_epoch(2)
    r1.set_epoch(1)
    run = _run([_pass(0, list(r0), epoch=2, size=64)], [_pass(1, list(r1), epoch=1, size=64)])
    overlap, missing = coverage.partition(run, "resumed run")
    both = set(r0) & set(r1)
    assert overlap.kind == "sampler-overlap" and overlap.details["reads_too_many"] == len(both) > 0
    assert overlap.details["overlaps"][0]["ranks"] == [0, 1]
    assert overlap.details["overlaps"][0]["examples"] == sorted(both)[:5]
    assert overlap.details["epochs"] == {"0": 2, "1": 1} and "disagree about the sampler epoch" in overlap.message
    assert missing.kind == "sampler-missing" and missing.details["count"] == 64 - len(set(r0) | set(r1))
    assert missing.details["examples"] == sorted(set(data) - set(r0) - set(r1))[:5]


def test_resumed_order_is_compared_with_the_reference_at_the_same_step():
    data = list(range(8))
    s = DistributedSampler(data, num_replicas=2, rank=0)
    orders = []
    for epoch in range(3):
        s.set_epoch(epoch)
        orders.append(list(s))
    reference = _run([_pass(0, orders[e], epoch=e, step=4 * e) for e in range(3)])
    replayed = _run([_pass(0, orders[0], epoch=0, step=0), _pass(0, orders[1], epoch=1, step=4)])
    (finding,) = coverage.order(reference, replayed, {0: 4})
    assert finding.kind == "epoch-order-replayed"
    assert (finding.details["step"], finding.details["replayed_epoch"], finding.details["expected_epoch"]) == (4, 0, 1)
    restored = _run([_pass(0, orders[1], epoch=1, step=0), _pass(0, orders[2], epoch=2, step=4)])
    assert coverage.order(reference, restored, {0: 4}) == []
    shuffled = _run([_pass(0, orders[1][::-1], epoch=7, step=0)])
    assert [f.kind for f in coverage.order(reference, shuffled, {0: 4})] == ["epoch-order-differs"]


def test_an_epoch_that_never_moves_is_reported_from_the_reference():
    order = [4, 7, 2, 1]
    stuck = _run([_pass(0, order, step=0), _pass(0, order, step=4)], [_pass(1, [6, 3, 0, 5], step=s) for s in (0, 4)])
    (finding,) = coverage.epoch_never_set(stuck)
    assert finding.kind == "sampler-epoch-never-set" and finding.details["ranks"] == [0, 1]
    assert finding.details["passes"] == 2 and "set_epoch" in finding.message
    moving = _run([_pass(0, order, epoch=0), _pass(0, [5, 2, 7, 1], epoch=1, step=4)])
    assert coverage.epoch_never_set(moving) == []


def test_disagreeing_ranks_and_where_each_stopped():
    rank = dict(outcome="last-good", reproduced=None, first_divergent_step=None, compared_steps=0, steps_taken=4)
    verdicts = [ranks.RankVerdict(rank=0, recovered_step=8, last_step=12, last_save=None, **rank),
                ranks.RankVerdict(rank=1, recovered_step=4, last_step=8,
                                  last_save={"save": 1, "step": 8, "ok": False}, **rank)]
    finding = ranks.disagreement(verdicts)
    assert finding.kind == "ranks-disagree" and finding.details["steps"] == {"0": 8, "1": 4}
    assert ranks.disagreement(verdicts[:1]) is None
    text = ranks.where([vars(v) for v in verdicts])
    assert text == "rank 0 at step 12 (no save); rank 1 at step 8 (last save 1 at step 8, unfinished)"


def test_a_random_sampler_replayed_after_a_resume_is_blamed_on_its_generator():
    gen = torch.Generator().manual_seed(0)
    s = torch.utils.data.RandomSampler(list(range(8)), generator=gen)
    orders = [list(s) for _ in range(2)]

    def passes(*specs):
        return [{**_pass(0, o, step=st), "sampler": "RandomSampler", "epoch": None, "shuffle": None, "replicas": None}
                for o, st in specs]

    reference = RunLog([ProcessLog(pid=1, rank=None, passes=passes((orders[0], 0), (orders[1], 4)))])
    replayed = RunLog([ProcessLog(pid=2, rank=None, passes=passes((orders[0], 0)))])
    (finding,) = coverage.order(reference, replayed, {0: 4})
    assert finding.kind == "epoch-order-replayed" and finding.details["replayed_step"] == 0
    assert finding.message.startswith("the resumed pass over its RandomSampler after step 4 read the rows in the order")
    assert "generator" in finding.message and "set_epoch" not in finding.message and "None" not in finding.message
