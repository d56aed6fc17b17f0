"""The event files as the conductor reads them back, including after a SIGKILL mid-line."""

from __future__ import annotations

import json

import pytest

from chaosckpt import protocol
from chaosckpt.agent.channel import EventWriter


def line(**fields):
    return json.dumps({"v": protocol.SCHEMA_VERSION, "ts": 1.0, "pid": 7, **fields}) + "\n"


def test_writer_output_reads_back(tmp_path):
    writer = EventWriter(str(tmp_path), rank=1)
    writer.emit("hello", rank=1)
    writer.emit("step", step=1, loss=[0.5])
    (path,) = protocol.event_files(tmp_path)
    assert path.name.startswith("events.1.")
    events = protocol.read_event_file(path)
    assert [e["t"] for e in events] == ["hello", "step"]
    assert events[1]["loss"] == [0.5] and events[1]["v"] == protocol.SCHEMA_VERSION


def test_torn_last_line_is_dropped(tmp_path):
    path = tmp_path / "events.x.7.jsonl"
    path.write_text(line(t="hello") + line(t="step", step=1) + '{"v": 1, "t": "st')
    assert [e["t"] for e in protocol.read_event_file(path)] == ["hello", "step"]


def test_undecodable_last_complete_line_is_dropped(tmp_path):
    path = tmp_path / "events.x.7.jsonl"
    path.write_text(line(t="hello") + '{"v": 1, "t"\n')
    assert [e["t"] for e in protocol.read_event_file(path)] == ["hello"]


def test_damage_before_the_last_line_is_an_error(tmp_path):
    path = tmp_path / "events.x.7.jsonl"
    path.write_text(line(t="hello") + "garbage\n" + line(t="step", step=1))
    with pytest.raises(protocol.ProtocolError, match="line 2"):
        protocol.read_event_file(path)


def test_unknown_versions_and_types_are_skipped(tmp_path):
    path = tmp_path / "events.x.7.jsonl"
    path.write_text(line(t="hello") + json.dumps({"v": 99, "t": "step"}) + "\n" + line(t="mystery"))
    assert [e["t"] for e in protocol.read_event_file(path)] == ["hello"]


def test_fault_flags(tmp_path):
    assert protocol.fault_flags(tmp_path / "missing") == []
    EventWriter(str(tmp_path), None).raise_flag(protocol.FAULT_FLAG_PREFIX)
    assert len(protocol.fault_flags(tmp_path)) == 1
