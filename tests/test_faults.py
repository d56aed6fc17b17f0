"""The fault-kind registry: every scenario's fault resolves to a kind, an unknown one is a one-line error, and
the spec a kind arms reaches the agent intact."""

from __future__ import annotations

from typing import get_args

import pytest
from conftest import run_chaosckpt

from chaosckpt import protocol
from chaosckpt.agent.faults import ArmedFault
from chaosckpt.conductor import faults, scenario as scenarios
from chaosckpt.conductor.errors import UsageError
from chaosckpt.conductor.faults.arming import NotArmable
from chaosckpt.conductor.faults.kind import Arming
from chaosckpt.conductor.runs.runlog import RunLog, _process


def test_the_literal_of_fault_names_is_the_registry():
    assert get_args(faults.FaultName) == tuple(faults.KINDS)
    assert all(kind.name == name for name, kind in faults.KINDS.items())


@pytest.mark.parametrize("name", scenarios.builtin_names())
def test_every_builtin_scenario_resolves_to_a_kind(name):
    scen = scenarios.load(name)
    kind = scen.kind
    assert kind is faults.kind_of(scen.fault, scen.trigger)
    expected = faults.ON_NODE[scen.fault] if scen.trigger.node is not None else faults.KINDS[scen.fault]
    assert kind is expected
    assert set(scen.params()["trigger"]) <= set(kind.trigger_keys)


def test_the_node_kinds_are_their_whole_job_kinds_on_one_node():
    assert {name: kind.name for name, kind in faults.ON_NODE.items()} == {"kill": "node-loss", "power-loss": "node-power-loss"}
    assert all(faults.KINDS[name].takes_node for name in faults.ON_NODE)
    assert scenarios.load("kill9-mid-save", {"node": 1}).kind.name == "node-loss"


def test_an_unknown_fault_is_one_line_naming_the_known_ones():
    with pytest.raises(UsageError) as err:
        scenarios.parse('name = "x"\nfault = "meteor"\n', "mine.toml")
    assert str(err.value) == ("mine.toml: unknown fault 'meteor' (known: kill, enospc, power-loss, eval-left-on, "
                              "rank-skew, preempt)")


def test_an_unknown_fault_on_the_command_line_is_a_usage_error(tmp_path):
    (tmp_path / "train.py").write_text("")
    (tmp_path / "meteor.toml").write_text('name = "x"\nfault = "meteor"\n')
    result = run_chaosckpt(["run", "--scenario", str(tmp_path / "meteor.toml"), "train.py"], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(
        "unknown fault 'meteor' (known: kill, enospc, power-loss, eval-left-on, rank-skew, preempt)")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("key, value, message", [("model", "eventual", "trigger.model must be one of ordered, strict"),
                                                 ("variant", "shuffle", "trigger.variant must be one of kill, offset, reset"),
                                                 ("offset", 0, "trigger.offset must be a whole number other than 0"),
                                                 ("rank", -2, "trigger.rank must be a rank number")])
def test_a_kind_checks_the_keys_only_it_takes(key, value, message):
    name = "power-loss" if key == "model" else "rank-epoch-skew"
    with pytest.raises(UsageError, match=message):
        scenarios.load(name, {key: value})


def _reference(tmp_path) -> RunLog:
    """A reference run of one process that completed two saves of 100 bytes in 4 writes."""
    path = str(tmp_path / "ckpt" / "last.pt")
    events = [{"v": 1, "t": "hello", "ts": 0.0, "pid": 7, "rank": 0, "cwd": str(tmp_path)}]
    for save in (1, 2):
        events += [{"v": 1, "t": "step", "ts": save, "pid": 7, "step": save, "loss": [1.0]},
                   {"v": 1, "t": "save-begin", "ts": save + 0.1, "pid": 7, "save": save, "step": save, "path": path, "via": "path",
                    "digest": "d"},
                   {"v": 1, "t": "save-file", "ts": save + 0.2, "pid": 7, "save": save, "path": path, "via": "path",
                    "ok": True, "bytes": 100, "writes": 4, "error": None},
                   {"v": 1, "t": "save-end", "ts": save + 0.3, "pid": 7, "save": save, "ok": True, "bytes": 100,
                    "writes": 4, "error": None}]
    return RunLog([_process(events)])


@pytest.mark.parametrize("name, params, sweep, placed", [
    ("kill9-mid-save", {}, False, {"kind": "halt", "at_byte": 50}),
    ("kill9-mid-save", {"write": 3}, False, {"kind": "halt", "at_write": 3}),
    ("kill9-mid-save", {}, True, {"kind": "halt", "after_save": True}),
    ("enospc", {}, False, {"kind": "enospc", "at_byte": 50}),
    ("enospc", {"free_bytes": 0}, False, {"kind": "disk-full", "free_bytes": 0}),
    ("power-loss", {}, False, {"kind": "halt", "after_save": True}),
    ("power-loss", {"op": 3}, False, {"kind": "halt", "at_op": 3}),
    ("eval-left-on", {}, False, {"kind": "halt", "after_save": True}),
])
def test_the_armed_spec_round_trips_to_the_agent(tmp_path, name, params, sweep, placed):
    scen = scenarios.load(name, params)
    track = [str(tmp_path / "ckpt")] if scen.kind.needs_journal(scen.trigger, sweep) else None
    spec, cut = scen.kind.arm(scen.trigger, _reference(tmp_path), Arming(tmp_path, track, sweep))
    assert cut is None and spec["v"] == protocol.FAULT_SPEC_VERSION and spec["save"] == 2 and spec["rank"] == 0
    assert {k: spec[k] for k in placed} == placed
    assert protocol.decode_fault(protocol.encode_fault(spec)) == spec
    fault = ArmedFault.from_json(protocol.encode_fault(spec))
    assert {k: getattr(fault, k) for k in placed} == placed and fault.save == 2 and fault.rank == 0
    assert (fault.track is not None) == (track is not None)


def test_the_resume_fault_of_eval_left_on_reaches_the_agent():
    spec = scenarios.load("eval-left-on").kind.resume_fault()
    fault = ArmedFault.from_json(protocol.encode_fault(spec))
    assert (fault.kind, fault.save, fault.after_load) == ("eval", 1, True)
    assert scenarios.load("kill9-mid-save").kind.resume_fault() is None


def test_sweep_names_the_scenarios_whose_fault_stops_a_save():
    with pytest.raises(UsageError, match="use it with kill9-mid-save, enospc or power-loss$"):
        faults.check_sweep(scenarios.load("eval-left-on"), True)
    faults.check_sweep(scenarios.load("node-loss"), True)


@pytest.mark.parametrize("name", ["node-loss", "node-power-loss"])
def test_a_node_fault_needs_a_multi_node_job(tmp_path, name):
    scen = scenarios.load(name)
    with pytest.raises(NotArmable, match="names a node of a multi-node job; run it with --nnodes N"):
        scen.kind.arm(scen.trigger, _reference(tmp_path), Arming(tmp_path, None, False, tmp_path))
