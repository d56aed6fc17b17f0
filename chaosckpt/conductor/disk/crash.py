"""What a disk holds after a crash, rebuilt from the agent's durability journal.

Three models, named for what they assume:

- ``none``: a process crash (SIGKILL), not a power loss: the page cache survives,
  the disk holds every byte the job wrote.
- ``ordered`` (ext4-like): namespace operations survive in order; a file's data
  only up to its last fsync, so a renamed file that was never fsynced comes back empty.
- ``strict`` (POSIX minimum): file data only up to its last fsync, and a name a
  created, renamed or unlinked entry got survives only if its directory was
  fsynced afterwards.

Files are assumed to be written sequentially (as checkpoints are): the durable
data of a file is a prefix of what it holds at the end, or of the copy the agent
kept before a truncation or a replacement destroyed it.
"""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Literal, Optional, Tuple, Union

Model = Literal["none", "ordered", "strict"]
MODELS = ("none", "ordered", "strict")
Ino = Tuple[int, int]


@dataclass
class Inode:
    """One file's data: its current version and size, and what of it is durable."""

    version: int = 0
    size: int = 0
    durable: Optional[Tuple[int, int]] = None  # (version, bytes) made durable by an fsync
    location: Optional[str] = None  # where its newest data is at the end of the journal
    kept: Dict[int, str] = field(default_factory=dict)  # older versions preserved by the agent
    link: Optional[str] = None  # a symbolic link's target: a name, no data (Lightning's save_last="link")


@dataclass
class Entry:
    """A name on the disk after the crash and the data it holds."""

    path: str
    source: Optional[str]
    length: int
    ino: Optional[Ino] = None
    version: int = 0
    link: Optional[str] = None

    def key(self) -> Tuple:
        return (self.path, self.ino, self.version, self.length, self.link)


class Disk:
    """Replays journal operations over the initial contents of the checkpoint directories."""

    def __init__(self, roots: Iterable[str]) -> None:
        self.roots = [os.path.abspath(r) for r in roots]
        self.inodes: Dict[Ino, Inode] = {}
        self.names: Dict[str, Ino] = {}
        self.dirs: set = set()
        self.durable_names: Dict[str, Dict[str, object]] = {}
        self.ops_applied = 0

    @classmethod
    def scan(cls, roots: Iterable[str]) -> "Disk":
        """The disk as the job finds it at start: everything on it is durable."""
        disk = cls(roots)
        for root in disk.roots:
            if not os.path.isdir(root):
                continue
            disk.dirs.add(root)
            for parent, dirnames, filenames in os.walk(root):
                for d in dirnames:
                    disk.dirs.add(os.path.join(parent, d))
                for f in filenames:
                    path = os.path.join(parent, f)
                    st = os.lstat(path)
                    ino = (st.st_dev, st.st_ino)
                    link = os.readlink(path) if os.path.islink(path) else None
                    disk.inodes[ino] = Inode(size=0 if link else st.st_size, durable=(0, 0 if link else st.st_size),
                                             location=path, link=link)
                    disk.names[path] = ino
        for d in disk.dirs:
            disk.durable_names[d] = disk._listing(d)
        return disk

    def _listing(self, directory: str) -> Dict[str, object]:
        out: Dict[str, object] = {p: ino for p, ino in self.names.items() if os.path.dirname(p) == directory}
        out.update({d: "dir" for d in self.dirs if os.path.dirname(d) == directory})
        return out

    def _inode(self, ino: Iterable[int]) -> Tuple[Ino, Inode]:
        key = (int(list(ino)[0]), int(list(ino)[1]))
        return key, self.inodes.setdefault(key, Inode())

    def apply(self, op: dict) -> None:
        """One journal operation, as the agent recorded it."""
        kind = op["op"]
        self.ops_applied += 1
        if kind == "open":
            key, inode = self._inode(op["ino"])
            if op["trunc"] and not op["created"]:
                if op.get("keep"):
                    inode.kept[inode.version] = op["keep"]
                inode.version += 1
                inode.size = 0
            else:
                inode.size = op.get("size", inode.size)
            inode.location = op["path"]
            self.names[op["path"]] = key
        elif kind == "write":
            _, inode = self._inode(op["ino"])
            inode.size = max(inode.size, op["off"] + op["len"])
        elif kind == "fsync":
            _, inode = self._inode(op["ino"])
            inode.durable = (inode.version, op["size"])
        elif kind == "dirsync":
            if op.get("path"):
                self.durable_names[op["path"]] = self._listing(op["path"])
        elif kind == "rename":
            key = self.names.pop(op["src"], None)
            if key is None and "ino" in op:
                key, _ = self._inode(op["ino"])
            if "replaced" in op:
                _, old = self._inode(op["replaced"])
                old.location = op.get("keep")
            if key is not None:
                self.names[op["dst"]] = key
                self.inodes[key].location = op["dst"]
            if op["src"] in self.dirs:
                self.dirs.discard(op["src"])
                self.dirs.add(op["dst"])
        elif kind == "unlink":
            key = self.names.pop(op["path"], None)
            if key is not None and op.get("keep"):
                self.inodes[key].location = op["keep"]
        elif kind == "link":  # a second name for the same inode: the same data, torn or whole
            key, _ = self._inode(op["ino"])
            self.names[op["path"]] = key
        elif kind == "symlink":
            key, inode = self._inode(op["ino"])
            inode.link, inode.durable = op["target"], (0, 0)
            self.names[op["path"]] = key
        elif kind == "mkdir":
            self.dirs.add(op["path"])
        elif kind == "rmdir":
            self.dirs.discard(op["path"])

    def under_roots(self, path: str) -> bool:
        return any(path == r or path.startswith(r + os.sep) for r in self.roots)

    def after_crash(self, model: Model, final: Optional["Disk"] = None) -> List[Entry]:
        """The files under the roots after a crash right now, with the data each holds; ``final`` is this
        disk replayed to the end of the journal, which knows where each inode's data is now."""
        final = final or self
        if model == "strict":
            names = self._strict_names()
        else:
            names = dict(self.names)
        entries = []
        for path, key in sorted(names.items()):
            if not self.under_roots(path):
                continue
            inode = self.inodes[key]
            if inode.link is not None:  # a name: it survives as the names do
                entries.append(Entry(path, None, 0, key, link=inode.link))
                continue
            if model == "none":
                version, length = inode.version, inode.size
            elif inode.durable is None:
                version, length = inode.version, 0
            else:
                version, length = inode.durable
            entries.append(Entry(path, final._source(key, version), length, key, version))
        return entries

    def _strict_names(self) -> Dict[str, Ino]:
        """Names that an fsync of their directory made durable, walking down from the roots."""
        out: Dict[str, Ino] = {}
        pending = list(self.roots)
        while pending:
            directory = pending.pop()
            for name, value in self.durable_names.get(directory, {}).items():
                if value == "dir":
                    pending.append(name)
                else:
                    out[name] = value
        return out

    def _source(self, key: Ino, version: int) -> Optional[str]:
        inode = self.inodes.get(key)
        if inode is None:
            return None
        return inode.kept.get(version) if version in inode.kept else inode.location

    def fork(self) -> "Disk":
        return copy.deepcopy(self)

    def relocated(self, move: Callable[[str], str]) -> "Disk":
        """The same disk with every path put where ``move`` says: a suite's shared run's journal mapped into a
        trial's own sandbox (``trial.shared``)."""
        disk = self.fork()
        disk.roots = [move(r) for r in self.roots]
        disk.dirs = {move(d) for d in self.dirs}
        disk.names = {move(p): key for p, key in self.names.items()}
        for inode in disk.inodes.values():
            inode.location = None if inode.location is None else move(inode.location)
            inode.kept = {v: move(p) for v, p in inode.kept.items()}
            if inode.link is not None and os.path.isabs(inode.link):
                inode.link = move(inode.link)
        disk.durable_names = {move(d): {move(p): v for p, v in listing.items()}
                              for d, listing in self.durable_names.items()}
        return disk

    def to_dict(self) -> Dict[str, object]:
        """The disk for ``json.dumps`` (inode numbers become lists): a suite keeps the start of a shared run's
        journal this way."""
        return {
            "roots": self.roots,
            "ops_applied": self.ops_applied,
            "dirs": sorted(self.dirs),
            "names": dict(self.names),
            "inodes": [[list(k), i.version, i.size, list(i.durable) if i.durable else None, i.location,
                        [[v, p] for v, p in i.kept.items()], i.link] for k, i in self.inodes.items()],
            "durable_names": self.durable_names,
        }

    @classmethod
    def from_dict(cls, data: Dict) -> "Disk":
        disk = cls(data["roots"])
        disk.ops_applied = data["ops_applied"]
        disk.dirs = set(data["dirs"])
        disk.names = {p: (k[0], k[1]) for p, k in data["names"].items()}
        for key, version, size, durable, location, kept, *link in data["inodes"]:
            disk.inodes[(key[0], key[1])] = Inode(version, size, (durable[0], durable[1]) if durable else None, location,
                                                   {v: p for v, p in kept}, *link)
        disk.durable_names = {d: {p: v if v == "dir" else (v[0], v[1]) for p, v in listing.items()}
                              for d, listing in data["durable_names"].items()}
        return disk


def materialize(entries: List[Entry], roots: Iterable[str], target_of=lambda p: p) -> None:
    """Rewrite the roots to hold exactly ``entries`` (each at ``target_of(path)``); a root that is not there and
    holds no entry stays absent: no folder the crashed run never made."""
    blobs: List[Tuple[str, Union[bytes, str]]] = []
    for entry in entries:
        data: Union[bytes, str] = b""
        if entry.link is not None:
            data = entry.link
        elif entry.length and entry.source and os.path.exists(entry.source):
            with open(entry.source, "rb") as f:
                data = f.read(entry.length)
        blobs.append((target_of(entry.path), data))
    for root in roots:
        root = os.path.abspath(root)
        target = Path(target_of(root))
        existed = target.exists()
        if existed:
            shutil.rmtree(target)
        if existed or any(e.path.startswith(root + os.sep) for e in entries):
            target.mkdir(parents=True)
    for path, data in blobs:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            os.symlink(data, path)
            continue
        with open(path, "wb") as f:
            f.write(data)


def missing_durability(disk: Disk, path: str, model: Model, name=lambda p: p) -> Optional[str]:
    """Why ``path``, as the job left it, does not survive the crash whole: every fsync it lacked, in one
    sentence (``name`` shows a path to the user); None when it survives."""
    key = disk.names.get(path)
    if key is None:
        return None
    inode = disk.inodes[key]
    if inode.link is not None:
        target = os.path.normpath(os.path.join(os.path.dirname(path), inode.link))
        pointed = disk.names.get(target)
        if pointed is None or disk.inodes[pointed].link is not None:  # a link to a link is not followed
            return None
        why = missing_durability(disk, target, model, name)
        return None if why is None else f"it links to {name(target)}, and {why}"
    missing = []
    if inode.durable is None or inode.durable != (inode.version, inode.size):
        durable = 0 if inode.durable is None or inode.durable[0] != inode.version else inode.durable[1]
        missing.append(f"its data was not fsynced ({durable} of {inode.size} bytes durable)")
    if model == "strict":
        missing += _missing_names(disk, path, key, name)
    return "; ".join(missing) or None


def _missing_names(disk: Disk, path: str, key: Ino, name) -> List[str]:
    """Under the strict model, the directory fsyncs ``path``'s name lacks: its own folder's after it was created
    or renamed, and the parent's of each folder above it that the job made and never made durable."""
    missing = []
    directory = os.path.dirname(path)
    if disk.durable_names.get(directory, {}).get(path) != key:
        missing.append(f"its name was not made durable: no fsync of {name(directory)}/ after it was created or renamed")
    while directory not in disk.roots and disk.under_roots(directory):
        parent = os.path.dirname(directory)
        if disk.durable_names.get(parent, {}).get(directory) != "dir":
            missing.append(f"the folder {name(directory)}/ it is in was made, but no fsync of {name(parent)}/ "
                           "followed")
        directory = parent
    return missing


def unseen(disk: Disk) -> List[str]:
    """Files under the roots that the journal never saw written: native code (safetensors, a C++ writer)
    wrote them, so no model can say what of them survives."""
    found = []
    for root in disk.roots:
        for parent, _, files in os.walk(root):
            for f in files:
                path = os.path.join(parent, f)
                st = os.lstat(path)
                if (st.st_dev, st.st_ino) not in disk.inodes:
                    found.append(path)
    return sorted(found)


def power_cut(disk: Disk, ops: Iterable[dict], model: Model, roots: Iterable[str], final: Optional[Disk] = None,
              native: Optional[List[str]] = None) -> Tuple[List[Entry], List[str]]:
    """Replay ``ops`` over ``disk`` and rewrite ``roots`` into what they hold when the power comes back;
    the entries written, and the files no model can judge (``unseen``), which are left as the job wrote them.
    A crash state rebuilt from a longer journal gives that journal's ``final`` disk (where the data is now)
    and its ``native`` files."""
    for op in ops:
        disk.apply(op)
    entries = disk.after_crash(model, final=final)
    native = unseen(disk) if native is None else native
    entries += [Entry(path, path, os.path.getsize(path)) for path in native]
    materialize(entries, roots)
    return entries, native
