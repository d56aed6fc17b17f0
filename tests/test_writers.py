"""A checkpoint's writers besides torch.save (open, os.write, shutil's copies, safetensors): their bytes count
toward the checkpoint, and an armed kill or ENOSPC lands in whichever of them carries its byte."""

from __future__ import annotations

import errno
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
    assert os.path.basename(event["path"]) == "model.safetensors" and event["bytes"] == 20
    assert type(error).__name__ == "SafetensorError" and "No space left" in str(error)
    assert os.path.getsize(tmp_path / "ckpt" / "model.safetensors") == 20
    armed = tmp_path / "armed.safetensors"  # armed for a later checkpoint: the same bytes, through Python
    events, rec, model, opt = _job(protocol.fault_spec("enospc", 9, at_byte=0))
    patched(rec)
    _step(rec, opt)
    st.save_file(model.state_dict(), str(armed))
    st.save_file.__chaosckpt_original__(model.state_dict(), str(tmp_path / "native.safetensors"))
    assert armed.read_bytes() == (tmp_path / "native.safetensors").read_bytes()


JOB = """
import json, os, shutil, torch
os.makedirs("ckpt", exist_ok=True)
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
        if call == "openat" and '"ckpt/' in args:
            fds[ret] = re.search(r'"(ckpt/[^"]*)"', args).group(1)
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
    assert {c[1] for c in off} == {"ckpt/state.json", "ckpt/log.bin", "ckpt/raw.bin", "ckpt/best.bin"}
    assert on == off
    events = [json.loads(line) for p in (tmp_path / "on" / "run").glob("events.*") for line in p.read_text().splitlines()]
    counted = [os.path.basename(e["path"]) for e in events if e["t"] == "save-file" and e["via"] == "write"]
    assert counted == ["state.json", "log.bin", "raw.bin", "best.bin"] * 2
