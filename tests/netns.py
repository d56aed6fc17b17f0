"""Machines of a cluster on one host: Linux network namespaces, one per node plus a hub holding a bridge,
each node's veth plugged into the bridge. Every address is the test's own, in a private /24 that exists
only inside these namespaces; nothing is touched in the host's own network stack, and everything made
is removed afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import List, Optional

IFNAME = "ccv"
"""The node's interface, the same name in every node namespace (gloo is pointed at it)."""


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


@dataclass
class Namespaces:
    nodes: int
    tag: str = field(default_factory=lambda: f"cc{os.getpid() % 100000}")
    made: List[str] = field(default_factory=list)

    @property
    def subnet(self) -> str:
        return f"10.231.{os.getpid() % 250}"

    @property
    def hub(self) -> str:
        return f"{self.tag}hub"

    def node(self, k: int) -> str:
        return f"{self.tag}n{k}"

    def address(self, k: int) -> str:
        return f"{self.subnet}.{k + 1}"

    @property
    def hub_address(self) -> str:
        return f"{self.subnet}.254"

    def hosts(self) -> str:
        return ",".join(self.address(k) for k in range(self.nodes))

    def node_cmd(self) -> str:
        return f"ip netns exec {self.tag}n{{node_rank}}"

    def conductor(self) -> List[str]:
        """The prefix that runs a command (chaosckpt itself) in the hub namespace."""
        return ["ip", "netns", "exec", self.hub]

    def create(self) -> Optional[str]:
        """Make the namespaces; None, or why they cannot be made here."""
        if shutil.which("ip") is None:
            return "the ip command (iproute2) is not installed"
        steps = [("netns", "add", self.hub)]
        steps += [("-n", self.hub, "link", "add", "br0", "type", "bridge"),
                  ("-n", self.hub, "addr", "add", f"{self.hub_address}/24", "dev", "br0"),
                  ("-n", self.hub, "link", "set", "br0", "up"), ("-n", self.hub, "link", "set", "lo", "up")]
        for k in range(self.nodes):
            ns = self.node(k)
            steps += [("netns", "add", ns),
                      ("-n", ns, "link", "add", IFNAME, "type", "veth", "peer", "name", f"p{k}", "netns", self.hub),
                      ("-n", ns, "addr", "add", f"{self.address(k)}/24", "dev", IFNAME),
                      ("-n", ns, "link", "set", IFNAME, "up"), ("-n", ns, "link", "set", "lo", "up"),
                      ("-n", self.hub, "link", "set", f"p{k}", "master", "br0"),
                      ("-n", self.hub, "link", "set", f"p{k}", "up")]
        for step in steps:
            done = _ip(*step)
            if step[:2] == ("netns", "add") and done.returncode == 0:
                self.made.append(step[2])
            if done.returncode != 0:
                self.remove()
                return f"network namespaces cannot be made here: ip {' '.join(step)}: {done.stderr.strip()}"
        return None

    def remove(self) -> None:
        """Delete every namespace made (their veths and the bridge go with them)."""
        for ns in reversed(self.made):
            _ip("netns", "del", ns)
        self.made.clear()

    def leftovers(self) -> List[str]:
        listed = _ip("netns", "list").stdout
        return [line.split()[0] for line in listed.splitlines() if line.startswith(self.tag)]
