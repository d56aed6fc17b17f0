"""The agent's patch table: every layer installs over the original in the order ``LAYERS`` states, whatever the
order of the install calls, never twice over itself, and leaves every attribute as it found it."""

from __future__ import annotations

import builtins
import io
import os

import pytest
import torch
import torch.distributed.checkpoint  # noqa: F401  (the dcp layers patch it)
import torch.distributed.checkpoint.state_dict  # noqa: F401

from chaosckpt.agent import fileops, guard, interpose, moves, patches, refusals, writers
from chaosckpt.agent.recorder import Recorder

pytest.importorskip("safetensors.torch")

_ABSENT = object()


class Events:
    def emit(self, kind, **fields):
        pass


def _states(tmp_path):
    """A state for every layer that leaves the process's I/O alone: the whole disk allowed, nothing tracked,
    no checkpoint open."""
    rec = Recorder(Events(), None, None)
    return {
        "guard": guard.checker([os.sep]),
        "refusals": refusals.Refusals(rec.emit),
        "journal": fileops.Journal(rec.emit, [], str(tmp_path / "run" / "keep")),
        "moves": moves.Moves(rec),
        "writers": writers.Counter(rec),
        "torch": interpose.Hooks(rec),
        "sampler": rec,
        "skew": ({"variant": "reset"}, []),
        "dcp": rec,
        "dcp-state-dict": rec,
        "safetensors": rec,
        "threads": rec,
        "dcp-process": rec,
        "dcp-helper": lambda: None,
    }


def _stored():
    """What each patched attribute holds, as stored on its module or class."""
    return {(p.owner, p.name): vars(patches.resolve(p.owner)).get(p.name, _ABSENT) for p in patches.TABLE}


def _layers_of(function):
    """The modules of the wrappers on ``function``, outermost first."""
    files = []
    while hasattr(function, "__chaosckpt_original__"):
        files.append(os.path.basename(function.__code__.co_filename))
        function = function.__chaosckpt_original__
    return files


def _uninstall_all():
    for layer in patches.LAYERS:
        patches.uninstall(layer)


def _depths():
    """How many wrappers each patched attribute this platform has carries."""
    return {(owner, name): len(_layers_of(getattr(patches.resolve(owner), name)))
            for owner, name in patches._CHAINS if hasattr(patches.resolve(owner), name)}


@pytest.fixture
def states(tmp_path):
    _uninstall_all()  # another test's (monkeypatched away since)
    before = _stored()
    yield _states(tmp_path)
    _uninstall_all()
    assert patches.installed() == ()
    after = _stored()
    assert [key for key in before if after[key] is not before[key]] == []


def test_every_entry_names_a_layer_and_an_attribute_that_exists():
    assert {p.layer for p in patches.TABLE} == set(patches.LAYERS)
    missing = [(p.owner, p.name) for p in patches.TABLE if not p.optional and not hasattr(patches.resolve(p.owner), p.name)]
    assert missing == []


def test_layers_nest_as_stated_whatever_the_order_they_are_installed_in(states):
    for layer in reversed(patches.LAYERS):
        patches.install(layer, states[layer])
    assert _layers_of(os.open) == ["writers.py", "fileops.py", "refusals.py", "guard.py"]
    assert _layers_of(os.rename) == ["moves.py", "fileops.py", "refusals.py", "guard.py"]
    assert _layers_of(os.write) == ["writers.py", "fileops.py"]
    for opener in (builtins.open, io.open):
        assert _layers_of(opener) == ["writers.py", "fileops.py", "refusals.py", "guard.py"]
    assert _layers_of(torch.save) == ["interpose.py"]


def test_installing_twice_replaces_the_layer_instead_of_wrapping_it_again(states, tmp_path):
    for layer in patches.LAYERS:
        patches.install(layer, states[layer])
    once = _depths()
    again = _states(tmp_path)
    for layer in patches.LAYERS:
        patches.install(layer, again[layer])
    assert _depths() == once
    assert once[("os", "open")] == 4 and once[("torch", "save")] == 1


def test_removing_a_middle_layer_keeps_the_others_in_order(states):
    for layer in ("guard", "journal", "writers"):
        patches.install(layer, states[layer])
    patches.uninstall("journal")
    assert _layers_of(os.open) == ["writers.py", "guard.py"]
    patches.uninstall("writers")
    assert _layers_of(os.open) == ["guard.py"]


def test_the_guard_installed_last_still_refuses_under_the_other_layers(states, tmp_path):
    for layer in ("writers", "journal"):
        patches.install(layer, states[layer])
    guard.install([str(tmp_path)])
    with open(tmp_path / "inside.txt", "w") as f:
        f.write("ok")
    with pytest.raises(OSError, match="Read-only file system"):
        open(os.path.join(os.path.dirname(tmp_path), "outside.txt"), "w")
    _uninstall_all()
    assert (tmp_path / "inside.txt").read_text() == "ok"


def test_a_refused_write_is_reported_even_when_the_job_catches_it_and_only_then(states, tmp_path):
    reported = []
    patches.install("refusals", refusals.Refusals(lambda kind, **fields: reported.append((kind, fields))))
    guard.install([str(tmp_path)])
    outside = os.path.join(os.path.dirname(tmp_path), "outside.txt")
    with open(tmp_path / "inside.txt", "w") as f:
        f.write("ok")
    os.rename(tmp_path / "inside.txt", tmp_path / "moved.txt")
    for attempt in (lambda: open(outside, "w"), lambda: os.rename(tmp_path / "moved.txt", outside),
                    lambda: os.open(outside, os.O_WRONLY | os.O_CREAT)):
        with pytest.raises(OSError, match="Read-only file system"):
            attempt()
    with pytest.raises(FileNotFoundError):
        open(tmp_path / "missing" / "x", "w")  # refused for another reason: not reported
    assert reported == [("refused", {"op": "open", "paths": [outside]}),
                        ("refused", {"op": "rename", "paths": [str(tmp_path / "moved.txt"), outside]}),
                        ("refused", {"op": "open", "paths": [outside]})]
