"""A checkpoint's writers besides torch.save (open, os.write, shutil's copies, safetensors): their bytes count
toward the checkpoint, and an armed kill or ENOSPC lands in whichever of them carries its byte."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from test_checkpoint_burst import _job, _save, _step

from chaosckpt import protocol
from chaosckpt.agent import interpose, patches, writers
from chaosckpt.conductor.runs.runlog import _process

st = pytest.importorskip("safetensors.torch")


@pytest.fixture
def patched():
    """Install the writers' patches on this process for one recorder at a time (installed again, they replace
    themselves); the originals come back after the test."""

    def install(rec):
        writers.install(rec)
        interpose.install_safetensors(rec)
    yield install
    patches.uninstall("writers")
    patches.uninstall("safetensors")


def _checkpoint(rec, model, folder, safetensors=False):
    """The writers_job's checkpoint: the model (torch.save, or safetensors), a JSON state file, an os.write,
    a shutil copy."""
    folder.mkdir(exist_ok=True)
    model_path = folder / ("model.safetensors" if safetensors else "model.pth")
    if safetensors:
        st.save_file(model.state_dict(), str(model_path))
    else:
        _save(rec, model.state_dict(), str(model_path))
    with open(folder / "state.json", "w") as f:
        json.dump({"step": rec.step, "pad": list(range(2000))}, f)
    fd = os.open(folder / "raw.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.write(fd, b"r" * 300)
    os.close(fd)
    shutil.copyfile(model_path, folder / "best.pth")


def _reference(tmp_path, patched, safetensors=False):
    events, rec, model, opt = _job()
    patched(rec)
    _step(rec, opt)
    _checkpoint(rec, model, tmp_path / "ref", safetensors)
    _step(rec, opt)
    (save,) = _process(events.events).saves
    return save


def test_every_writer_s_bytes_count_toward_the_checkpoint(tmp_path, patched):
    events, rec, model, opt = _job()
    patched(rec)
    (tmp_path / "logs").mkdir()
    _step(rec, opt)
    _checkpoint(rec, model, tmp_path / "ckpt")
    (tmp_path / "logs" / "metrics.json").write_text("{}")  # outside the checkpoint's folder: not part of it
    _step(rec, opt)
    (tmp_path / "ckpt" / "after.json").write_text("{}")  # after the next step: no checkpoint is open
    (save,) = _process(events.events).saves
    names = ["model.pth", "state.json", "raw.bin", "best.pth"]
    assert [os.path.basename(f["path"]) for f in save.files] == names
    assert [f["via"] for f in save.files] == ["path", "write", "write", "write"]
    sizes = [os.path.getsize(tmp_path / "ckpt" / n) for n in names]
    assert [f["bytes"] for f in save.files] == sizes
    assert save.ok and save.bytes == sum(sizes)


def test_a_torch_save_into_a_file_the_job_opened_in_the_checkpoint_counts_once(tmp_path, patched):
    events, rec, model, opt = _job()
    patched(rec)
    _step(rec, opt)
    _save(rec, model.state_dict(), str(tmp_path / "model.pth"))
    with open(tmp_path / "optimizer.pth", "wb") as f:  # opened while the checkpoint is open: counted...
        torch.save(opt.state_dict(), f)  # ...until torch.save's own writer counts it
    _step(rec, opt)
    (save,) = _process(events.events).saves
    assert [os.path.basename(f["path"]) for f in save.files] == ["model.pth", "optimizer.pth"]
    assert save.bytes == os.path.getsize(tmp_path / "model.pth") + os.path.getsize(tmp_path / "optimizer.pth")


def _faulted(tmp_path, patched, fault, safetensors=False):
    events, rec, model, opt = _job(fault)
    patched(rec)
    _step(rec, opt)
    with pytest.raises(Exception) as raised:
        _checkpoint(rec, model, tmp_path / "ckpt", safetensors)
    (event,) = [e for e in events.events if e["t"] == "fault"]
    return event, raised.value


@pytest.mark.parametrize("landing", ["state.json", "raw.bin", "best.pth"])
def test_enospc_at_a_fraction_of_the_checkpoint_lands_in_the_writer_carrying_that_byte(tmp_path, patched, landing):
    reference = _reference(tmp_path, patched)
    before = 0
    for f in reference.files:
        if os.path.basename(f["path"]) == landing:
            break
        before += f["bytes"]
    at = before + 100
    event, error = _faulted(tmp_path, patched, protocol.fault_spec("enospc", 1, at_byte=at))
    assert os.path.basename(event["path"]) == landing and event["bytes"] == at
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    assert os.path.getsize(tmp_path / "ckpt" / landing) == 100


def test_a_save_reports_each_file_s_bytes_in_the_order_they_were_written(tmp_path, patched):
    reference = _reference(tmp_path, patched)
    assert reference.sizes == [f["bytes"] for f in reference.files] and sum(reference.sizes) == reference.bytes


def _two_files(rec, model, opt, folder, grow=0):
    """A checkpoint of three files: ``model.pth`` (torch.save, which opens the checkpoint), then, written with
    ``open``, ``a.bin`` (1000 bytes, ``grow`` more: a job writing its own folder's path into it, in a folder of
    another length) and ``b.bin`` (2000 bytes)."""
    _step(rec, opt)
    folder.mkdir(exist_ok=True)
    _save(rec, model.state_dict(), str(folder / "model.pth"))
    (folder / "a.bin").write_bytes(b"a" * (1000 + grow))
    (folder / "b.bin").write_bytes(b"b" * 2000)
    _step(rec, opt)


@pytest.mark.parametrize("grow", [-64, 64])
@pytest.mark.parametrize("into_a, landing, left", [(1000, "b.bin", 0), (999, "a.bin", 500), (1500, "b.bin", 500),
                                                   (2999, "b.bin", 1000)])
def test_a_fraction_of_the_save_cuts_the_file_that_held_it_in_the_reference_when_the_file_before_changed_size(
        tmp_path, patched, grow, into_a, landing, left):
    """A fraction of the reference's save is armed as a byte of the file that held it (at most half way into a
    small file, so a file a little shorter in another run is still cut): the first byte of ``b.bin`` cuts ``b.bin``
    before its first byte however long ``a.bin`` is, where counted across the save the same byte would cut
    ``a.bin`` short or ``b.bin`` past its start. ``into_a``: the byte, counted from ``a.bin``'s start."""
    from chaosckpt.conductor.faults import arming
    from chaosckpt.conductor.faults.trigger import Trigger

    events, rec, model, opt = _job()
    patched(rec)
    _two_files(rec, model, opt, tmp_path / "ref")
    (reference,) = _process(events.events).saves
    head = os.path.getsize(tmp_path / "ref" / "model.pth")
    assert reference.sizes == [head, 1000, 2000] and reference.bytes == head + 3000
    placed = arming.in_save(Trigger(save=1, fraction=(head + into_a + 0.5) / reference.bytes), reference)
    events, rec, model, opt = _job(protocol.fault_spec("enospc", 1, **placed))
    patched(rec)
    with pytest.raises(OSError):
        _two_files(rec, model, opt, tmp_path / "ckpt", grow)
    (event,) = [e for e in events.events if e["t"] == "fault"]
    assert os.path.basename(event["path"]) == landing and event["bytes"] == left
    assert os.path.getsize(tmp_path / "ckpt" / landing) == left


def test_a_fault_in_one_named_file_counts_that_file_s_bytes(tmp_path, patched):
    event, _ = _faulted(tmp_path, patched, protocol.fault_spec("enospc", 1, at_byte=10, file="best.pth"))
    assert os.path.basename(event["path"]) == "best.pth" and event["bytes"] == 10
    assert os.path.getsize(tmp_path / "ckpt" / "best.pth") == 10
    assert os.path.getsize(tmp_path / "ckpt" / "state.json") > 10


def test_safetensors_bytes_count_natively_and_an_armed_fault_lands_inside_them(tmp_path, patched):
    reference = _reference(tmp_path, patched, safetensors=True)
    first = reference.files[0]
    assert first["via"] == "safetensors" and first["bytes"] == os.path.getsize(tmp_path / "ref" / "model.safetensors")
    assert reference.bytes == sum(f["bytes"] for f in reference.files)
    event, error = _faulted(tmp_path, patched, protocol.fault_spec("enospc", 1, at_byte=20), safetensors=True)
    # struck in safetensors' temporary file beside model.safetensors, the file it writes the bytes to
    assert os.path.basename(event["path"]).startswith(".tmp") and event["bytes"] == 20
    assert os.path.dirname(event["path"]) == str(tmp_path / "ckpt")
    assert type(error).__name__ == "SafetensorError" and "No space left" in str(error)
    # as safetensors (0.8) itself: the bytes went to a temporary file beside the target, removed on the error
    assert sorted(os.listdir(tmp_path / "ckpt")) == []
    armed = tmp_path / "armed.safetensors"  # armed for a later checkpoint: the same bytes, through Python
    events, rec, model, opt = _job(protocol.fault_spec("enospc", 9, at_byte=0))
    patched(rec)
    _step(rec, opt)
    st.save_file(model.state_dict(), str(armed))
    st.save_file.__chaosckpt_original__(model.state_dict(), str(tmp_path / "native.safetensors"))
    assert armed.read_bytes() == (tmp_path / "native.safetensors").read_bytes()


def _memory_save(rec, obj):
    """``torch.save`` into a ``BytesIO`` through the agent's patch: the bytes it serialized."""
    buffer = io.BytesIO()
    interpose.torch_save(interpose.Hooks(rec), torch.save)(obj, buffer)
    return buffer.getvalue()


def _membuf_checkpoint(rec, model, opt, folder):
    """membuf_job's checkpoint: serialized into memory, a log line written elsewhere, the bytes written in place."""
    data = _memory_save(rec, {"model": model.state_dict(), "opt": opt.state_dict()})
    (folder.parent / "train.log").write_text("epoch done\n")  # opened while the checkpoint is open: not its bytes
    folder.mkdir(exist_ok=True)
    (folder / "last.pt").write_bytes(data)
    return data


def test_a_save_into_memory_counts_no_bytes_and_the_file_write_of_its_bytes_counts_them(tmp_path, patched):
    events, rec, model, opt = _job()
    patched(rec)
    _step(rec, opt)
    data = _membuf_checkpoint(rec, model, opt, tmp_path / "ckpt")
    _step(rec, opt)
    (save,) = _process(events.events).saves
    last = str(tmp_path / "ckpt" / "last.pt")
    assert save.path is None and [e["via"] for e in events.events if e["t"] == "save-begin"] == ["memory"]
    assert [(f["path"], f["via"], f["bytes"], f.get("memory"), f.get("whole")) for f in save.files] == [
        (last, "write", len(data), True, True)]
    assert save.ok and save.bytes == len(data) and save.paths() == [last]


def test_a_fault_skips_the_save_into_memory_and_strikes_the_file_write_of_its_bytes(tmp_path, patched):
    events, rec, model, opt = _job(protocol.fault_spec("enospc", 1, at_byte=100))
    patched(rec)
    _step(rec, opt)
    with pytest.raises(OSError) as raised:
        _membuf_checkpoint(rec, model, opt, tmp_path / "ckpt")
    assert raised.value.errno == errno.ENOSPC
    (event,) = [e for e in events.events if e["t"] == "fault"]
    assert event["path"] == str(tmp_path / "ckpt" / "last.pt") and event["bytes"] == 100
    assert (tmp_path / "ckpt" / "last.pt").stat().st_size == 100 and (tmp_path / "train.log").stat().st_size == 11
    rec.close_checkpoint()
    (end,) = [e for e in events.events if e["t"] == "save-end"]
    assert not end["ok"] and end["error"] == os.strerror(errno.ENOSPC)


def test_a_fault_in_the_named_file_that_carries_bytes_saved_into_memory_lands_there(tmp_path, patched):
    events, rec, model, opt = _job(protocol.fault_spec("enospc", 1, at_byte=10, file="last.pt"))
    patched(rec)
    _step(rec, opt)
    with pytest.raises(OSError):
        _membuf_checkpoint(rec, model, opt, tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "last.pt").stat().st_size == 10


JOB = """
import io, json, os, shutil, torch
for folder in ("ckpt", "ckpt_log", "ckpt_mem"):
    os.makedirs(folder, exist_ok=True)
m = torch.nn.Linear(4, 1)
o = torch.optim.SGD(m.parameters(), lr=0.1)
for step in range(1, 5):
    m(torch.randn(2, 4)).sum().backward()
    o.step()
    if step % 2 == 0:
        torch.save(m.state_dict(), "ckpt/model.pth")
        with open("ckpt/state.json", "w") as f:
            json.dump({"step": step, "pad": list(range(3000))}, f)
        with open("ckpt/log.bin", "ab") as f:
            f.write(b"x" * 10000)
        fd = os.open("ckpt/raw.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.write(fd, b"y" * 100)
        os.close(fd)
        shutil.copyfile("ckpt/raw.bin", "ckpt/best.bin")
        buffer = io.BytesIO()
        torch.save(o.state_dict(), buffer)
        with open("ckpt_log/train.log", "a") as f:  # outside the checkpoint's folders, not its bytes: uncounted
            f.write("saved\\n")
        with open("ckpt_mem/opt.pt", "wb") as f:  # carries the bytes saved into memory: counted wherever it is
            f.write(buffer.getvalue())
"""


def _file_calls(trace: str, skip: str) -> list:
    """The system calls on files under ckpt/ (but ``skip``), fd numbers and addresses left out."""
    import re

    fds, calls = {}, []
    for line in trace.splitlines():
        m = re.match(r"(\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+)", line)
        if not m:
            continue
        _, call, args, ret = m.groups()
        args = re.sub(r"0x[0-9a-f]+", "ADDR", args)
        if call == "openat" and re.search(r'"ckpt\w*/', args):
            fds[ret] = re.search(r'"(ckpt\w*/[^"]*)"', args).group(1)
            if fds[ret] != skip:
                calls.append((call, fds[ret], args.split(", ", 1)[1]))
            continue
        fd, _, rest = args.partition(", ")
        if call == "sendfile":
            rest = rest.partition(", ")[2]  # the source's descriptor: the agent holds its event file open
        if fd in fds and fds[fd] != skip:
            calls.append((call, fds[fd], rest if call != "write" else len(rest), ret))
        if call == "close":
            fds.pop(fd, None)
    return calls


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_counting_leaves_the_job_s_system_calls_as_they_are(tmp_path):
    """Without an armed fault, the agent counts the checkpoint's open/os.write/copy bytes with the same system
    calls, in the same order, as the job makes without it (torch.save's own file is the torch.save patch's)."""
    from chaosckpt import protocol
    from chaosckpt.conductor.runs.launcher import BOOT_DIR

    (tmp_path / "job.py").write_text(JOB)
    traces = []
    for agent in (False, True):
        work = tmp_path / ("on" if agent else "off")
        work.mkdir()
        env = {k: v for k, v in os.environ.items() if k != protocol.ENV_RUN_DIR}
        if agent:
            (work / "run").mkdir()
            env[protocol.ENV_RUN_DIR] = str(work / "run")
            env["PYTHONPATH"] = os.pathsep.join([str(BOOT_DIR), env.get("PYTHONPATH", "")])
        subprocess.run(["strace", "-f", "-qq", "--seccomp-bpf", "-o", str(work / "trace"), "-e",
                        "trace=openat,write,close,lseek,fstat,newfstatat,ioctl,sendfile,copy_file_range,fsync",
                        sys.executable, str(tmp_path / "job.py")], cwd=work, env=env, check=True, timeout=120)
        traces.append(_file_calls((work / "trace").read_text(), skip="ckpt/model.pth"))
    off, on = traces
    assert {c[1] for c in off} == {"ckpt/state.json", "ckpt/log.bin", "ckpt/raw.bin", "ckpt/best.bin",
                                   "ckpt_log/train.log", "ckpt_mem/opt.pt"}
    assert on == off
    events = [json.loads(line) for p in (tmp_path / "on" / "run").glob("events.*") for line in p.read_text().splitlines()]
    counted = [os.path.basename(e["path"]) for e in events if e["t"] == "save-file" and e["via"] == "write"]
    assert counted == ["state.json", "log.bin", "raw.bin", "best.bin", "opt.pt"] * 2


def test_a_dcp_save_names_each_file_it_wrote_in_its_folder_and_a_fault_in_one_of_them_lands_there(tmp_path, patched):
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    def saved(fault=None):
        events, rec, model, opt = _job(fault)
        patched(rec)
        interpose.install_dcp(rec)
        _step(rec, opt)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no process group: a single-process save, as DCP warns
            try:
                dcp.save({"model": model.state_dict()}, checkpoint_id=str(tmp_path / "ckpt" / "step_1"))
            except CheckpointException:  # the armed ENOSPC, as DCP raises it
                assert fault is not None
        _step(rec, opt)
        return events.events

    try:
        (save,) = _process(saved()).saves
        folder = tmp_path / "ckpt" / "step_1"
        parts = {p["name"]: p["bytes"] for p in save.files[0]["parts"]}
        assert parts == {".metadata.tmp": os.path.getsize(folder / ".metadata"),
                         "__0_0.distcp": os.path.getsize(folder / "__0_0.distcp")}
        [event] = [e for e in saved(protocol.fault_spec("enospc", 1, at_byte=10, file=".metadata.tmp"))
                   if e["t"] == "fault"]
        assert os.path.basename(event["path"]) == ".metadata.tmp" and event["bytes"] == 10
    finally:
        patches.uninstall("dcp")
