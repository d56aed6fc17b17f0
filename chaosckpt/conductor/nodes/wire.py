"""The conductor-node connection: JSON messages a line each over TCP, opened by a mutual HMAC handshake
over a per-trial token, so only the nodes this trial started can feed it events or take its orders."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import threading
from typing import Any, Dict, Optional

Message = Dict[str, Any]
HANDSHAKE_S = 10.0


class WireError(Exception):
    """The peer closed the connection, sent something that is not a message, or failed the handshake."""


def _mac(token: str, *parts: object) -> str:
    return hmac.new(token.encode(), "|".join(str(p) for p in parts).encode(), hashlib.sha256).hexdigest()


class Wire:
    """One end of a connection: ``send`` is safe from several threads, ``recv`` from one."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._reader = sock.makefile("rb")
        self._lock = threading.Lock()

    def send(self, message: Message) -> None:
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        with self._lock:
            self.sock.sendall(data)

    def recv(self) -> Message:
        line = self._reader.readline()
        if not line.endswith(b"\n"):
            raise WireError("the connection closed")
        try:
            message = json.loads(line)
        except ValueError:
            raise WireError("a line that is not JSON") from None
        if not isinstance(message, dict):
            raise WireError("a message that is not an object")
        return message

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def accept(sock: socket.socket, token: str) -> Optional[tuple]:
    """Conductor side: authenticate a connecting node; ``(wire, node_rank)``, or None for a stranger."""
    wire = Wire(sock)
    sock.settimeout(HANDSHAKE_S)
    try:
        nonce = secrets.token_hex(16)
        wire.send({"t": "challenge", "nonce": nonce})
        reply = wire.recv()
        node = reply.get("node")
        if not isinstance(node, int) or not hmac.compare_digest(str(reply.get("mac")), _mac(token, "node", nonce, node)):
            wire.close()
            return None
        wire.send({"t": "welcome", "mac": _mac(token, "conductor", reply.get("nonce"), node)})
    except (OSError, WireError):
        wire.close()
        return None
    sock.settimeout(None)
    return wire, node


def connect(address: str, token: str, node: int, timeout_s: float = 30.0) -> Wire:
    """Node side: connect to the conductor at ``host:port`` and prove both ends hold ``token``."""
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s)
    wire = Wire(sock)
    challenge = wire.recv()
    nonce = secrets.token_hex(16)
    wire.send({"node": node, "nonce": nonce, "mac": _mac(token, "node", challenge.get("nonce"), node)})
    welcome = wire.recv()
    if not hmac.compare_digest(str(welcome.get("mac")), _mac(token, "conductor", nonce, node)):
        wire.close()
        raise WireError("the conductor does not hold this trial's token")
    sock.settimeout(None)
    return wire
