"""The agent's pieces in isolation: who records, where a fault cuts, what a digest sees."""

from __future__ import annotations

import json
import random

import pytest
import torch

from chaosckpt import protocol
from chaosckpt.agent import fingerprint, runtime
from chaosckpt.agent.faults import ArmedFault, FaultSpecError


@pytest.mark.parametrize(
    "argv, role",
    [
        (["python", "train.py"], "training"),
        (["python", "-u", "train.py", "--lr", "1"], "training"),
        (["python", "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py"], "launcher"),
        (["python", "/venv/bin/torchrun", "--nproc_per_node", "2", "train.py"], "launcher"),
        (["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()", "--multiprocessing-fork"], "mp-child"),
        (["python", "-c", "from multiprocessing.resource_tracker import main;main(5)"], "mp-helper"),
        (["python", "-c", "from multiprocessing.forkserver import main; main()"], "mp-helper"),
    ],
)
def test_role(monkeypatch, argv, role):
    monkeypatch.setenv(protocol.ENV_RUN_DIR, "/tmp/x")
    monkeypatch.setattr("sys.orig_argv", argv)
    assert runtime.role() == role


def test_role_is_off_without_the_run_directory(monkeypatch):
    monkeypatch.delenv(protocol.ENV_RUN_DIR, raising=False)
    assert runtime.role() == "off"


def test_fault_cut_at_a_byte_offset():
    fault = ArmedFault.from_json(protocol.encode_fault(protocol.fault_spec("halt", 2, at_byte=150)))
    assert fault.cut(writes_done=0, bytes_done=0, size=100) is None
    assert fault.cut(writes_done=1, bytes_done=100, size=100) == 50
    assert fault.cut(writes_done=2, bytes_done=200, size=100) is None


def test_fault_cut_before_a_write():
    fault = ArmedFault.from_json(protocol.encode_fault(protocol.fault_spec("halt", 1, at_write=3)))
    assert [fault.cut(n, n * 10, 10) for n in range(4)] == [None, None, 0, None]


@pytest.mark.parametrize("spec", [{"kind": "halt", "save": 1}, {"kind": "nuke", "save": 1, "at_write": 1},
                                  {"kind": "halt", "save": 0, "at_write": 1}, {"kind": "halt", "save": 1, "at": 3},
                                  {"kind": "halt", "save": 1, "at_write": "3"}, {"kind": "halt", "save": 1, "after_save": 1}])
def test_bad_fault_specs(spec):
    with pytest.raises(FaultSpecError):
        ArmedFault.from_json(json.dumps({"v": protocol.FAULT_SPEC_VERSION, **spec}))


@pytest.mark.parametrize("text", ['{"kind": "halt", "save": 1, "at_write": 1}', '{"v": 99, "kind": "halt", "save": 1, "at_write": 1}',
                                  "[1]", "not json"])
def test_fault_specs_of_no_or_another_version_are_refused(text):
    with pytest.raises(FaultSpecError):
        ArmedFault.from_json(text)


def test_fault_rank_filter():
    fault = ArmedFault.from_json(protocol.encode_fault(protocol.fault_spec("halt", 1, at_write=1, rank=1)))
    assert fault.applies_to(1) and not fault.applies_to(0) and not fault.applies_to(None)


def test_exact_digest_is_exact_and_order_sensitive():
    a = torch.arange(1000, dtype=torch.float32)
    b = a.clone()
    assert fingerprint.exact_digest([a, b]) == fingerprint.exact_digest([a.clone(), b.clone()])
    swapped = a.clone()
    swapped[[3, 4]] = swapped[[4, 3]]
    assert fingerprint.exact_digest([swapped, b]) != fingerprint.exact_digest([a, b])
    assert fingerprint.exact_digest([b, a[:-1]]) != fingerprint.exact_digest([a[:-1], b])
    nudged = a.clone()
    nudged[999] = torch.nextafter(nudged[999], torch.tensor(1e9))
    assert fingerprint.exact_digest([nudged]) != fingerprint.exact_digest([a])


def test_sample_fingerprint_follows_training_updates():
    gen = torch.Generator().manual_seed(0)
    p = torch.randn(100_000, generator=gen)
    fp, total = fingerprint.sample_fingerprint([p])
    assert fingerprint.sample_fingerprint([p.clone()]) == (fp, total)
    p.add_(1e-4 * torch.randn(p.shape, generator=gen))  # an SGD step's size; a float32 sum can hide a 1e-6 one
    assert fingerprint.sample_fingerprint([p])[0] != fp


def test_rng_fingerprints_change_when_a_stream_is_drawn_from():
    before = fingerprint.rng_fingerprints()
    random.random()
    after = fingerprint.rng_fingerprints()
    assert before["python"] != after["python"] and before["torch"] == after["torch"]
    torch.rand(1)
    assert fingerprint.rng_fingerprints()["torch"] != after["torch"]


def test_a_generator_held_in_several_places_has_one_name_and_its_aliases():
    from torch.utils.data import DataLoader

    from chaosckpt.agent import streams

    gen = torch.Generator().manual_seed(0)
    loader = DataLoader(list(range(4)), shuffle=True, generator=gen)
    found, aliases = streams.find_private()
    (name,) = [n for n, g in found.items() if g is gen]
    assert name == "torch.Generator at DataLoader.generator"
    assert aliases[name] == ["torch.Generator at RandomSampler.generator"]
    assert loader.generator is gen
