"""Hosts on one machine: worker groups in Linux network namespaces, each its own "host".

Each host is a namespace joined to this one by a veth pair on its own /30 of 10.231.<x>.0/24
(x random, so parallel runs do not clash). PostgreSQL stays where it is: a TCP forwarder in
this process listens on each host-side veth address and relays every connection to the test
database, so a worker in a namespace reaches it at `<host-side ip>:<port>` and nowhere else.
`cut(host)` takes the host-side link down: packets are dropped, nothing is reset, the host's
connections stall as they do behind a real partition (its neighbour entry for the far end is
permanent, so even new connections hang rather than fail for want of an ARP answer);
`restore(host)` brings it back and TCP retransmission carries on where it stopped, after its
backoff (seconds, as after a real partition).

Needs root and iproute2 (`ip netns`); without them the tests skip, saying so, unless
REDRIVE_REQUIRE_NETNS=1 (CI), where they fail instead.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import sys
import threading
import uuid
from functools import cache
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.conftest import BASE_DIR, Processes


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


@cache
def unavailable() -> str | None:
    """Why network namespaces cannot be used here (None: they can)."""
    if os.geteuid() != 0:
        return "not running as root"
    name = f"rdprobe{uuid.uuid4().hex[:8]}"
    try:
        made = _ip("netns", "add", name, check=False)
    except FileNotFoundError:
        return "no `ip` command (iproute2)"
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


def require_netns() -> None:
    reason = unavailable()
    if reason is None:
        return
    message = f"network namespaces need root and iproute2: {reason}"
    if os.environ.get("REDRIVE_REQUIRE_NETNS") == "1":
        pytest.fail(message)
    pytest.skip(message)


class Forwarder:
    """Relays TCP connections accepted on listening sockets to `target` (host, port): pure
    Python, a thread per listener and two per connection (one per direction)."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._listeners: list[socket.socket] = []
        self._open: set[_Relayed] = set()
        self._threads: list[threading.Thread] = []
        self.accepted = 0

    def listen(self, address: str) -> int:
        """Listen on `address` (a free port); returns the port."""
        listener = socket.create_server((address, 0))
        listener.settimeout(0.2)  # so the accept loop sees a stop
        self._listeners.append(listener)
        self._spawn(self._accept_loop, listener, name=f"forward-accept-{address}")
        return listener.getsockname()[1]

    def _spawn(self, target, *args, name):
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _accept_loop(self, listener: socket.socket):
        while not self._stopping.is_set():
            try:
                downstream, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            downstream.settimeout(None)
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                downstream.close()
                continue
            upstream.settimeout(None)
            for sock in (downstream, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            relayed = _Relayed(downstream, upstream)
            relayed.listener = listener.getsockname()[0]
            relayed.upstream_port = upstream.getsockname()[1]
            with self._lock:
                self._open.add(relayed)
                self.accepted += 1
            self._spawn(self._pump, relayed, downstream, upstream, name="forward-up")
            self._spawn(self._pump, relayed, upstream, downstream, name="forward-down")

    def _pump(self, relayed: _Relayed, source: socket.socket, sink: socket.socket):
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)  # pass the end of the stream on
        except OSError:
            relayed.shutdown()  # reset or closed on one side: end it on both, as a peer would
        finally:
            if relayed.pump_done():
                with self._lock:
                    self._open.discard(relayed)

    def upstream_ports(self, address: str) -> set[int]:
        """Local ports of the open connections to the target accepted on `address`: the
        `client_port` PostgreSQL shows (pg_stat_activity) for that host's sessions."""
        with self._lock:
            return {r.upstream_port for r in self._open if r.listener == address}

    def close(self):
        self._stopping.set()
        for listener in self._listeners:
            listener.close()
        with self._lock:
            still_open, threads = list(self._open), list(self._threads)
        for relayed in still_open:
            relayed.shutdown()
        for thread in threads:
            thread.join(timeout=2.0)


class _Relayed:
    """One relayed connection: the last of its two pumps to finish closes both sockets."""

    def __init__(self, *sockets: socket.socket):
        self.sockets = sockets
        self.listener, self.upstream_port = "", 0
        self._pumps = 2
        self._lock = threading.Lock()

    def shutdown(self):
        for sock in self.sockets:
            with contextlib.suppress(OSError):  # closed or never connected
                sock.shutdown(socket.SHUT_RDWR)

    def pump_done(self) -> bool:
        with self._lock:
            self._pumps -= 1
            if self._pumps:
                return False
        for sock in self.sockets:
            sock.close()
        return True


class Hosts:
    """Network namespaces `rd<id>-<name>`, each joined to this namespace by a veth pair, with
    the database reachable from each at `address(name)`:`port(name)` through the forwarder."""

    def __init__(self, names=("a", "b"), *, target: tuple[str, int]):
        require_netns()
        self.id = uuid.uuid4().hex[:6]
        taken = _ip("-4", "-o", "addr", "show").stdout  # another run's hosts, say
        self.subnet = random.choice(
            [x for x in range(1, 255) if f" 10.231.{x}." not in taken]
        )  # 10.231.<subnet>.0/24, a /30 per host
        self.forwarder = Forwarder(target)
        self.hosts: dict[str, dict] = {}
        try:
            for n, name in enumerate(names):
                self._add(name, n)
        except BaseException:
            self.close()
            raise

    def _add(self, name: str, n: int):
        ns = f"rd{self.id}-{name}"
        outside, inside = f"rd{self.id}{name}h", f"rd{self.id}{name}n"  # <= 15 characters
        base = 4 * n
        here, there = f"10.231.{self.subnet}.{base + 1}", f"10.231.{self.subnet}.{base + 2}"
        _ip("netns", "add", ns)
        self.hosts[name] = {"ns": ns, "link": outside, "address": here, "inside": there}
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", ns)
        _ip("addr", "add", f"{here}/30", "dev", outside)
        _ip("link", "set", outside, "up")
        self.run(name, "ip", "addr", "add", f"{there}/30", "dev", inside)
        self.run(name, "ip", "link", "set", inside, "up")
        self.run(name, "ip", "link", "set", "lo", "up")
        # The host knows the far end's address for good, as it knows its router's: while cut,
        # its packets are dropped on the way rather than refused at once for want of an ARP
        # answer (a lost neighbour fails new connections with "no route" after 3 s), so new
        # connections hang as existing ones do.
        mac = Path(f"/sys/class/net/{outside}/address").read_text().strip()
        self.run(name, "ip", "neigh", "replace", here, "lladdr", mac, "dev", inside, "nud",
                 "permanent")  # fmt: skip
        self.hosts[name]["port"] = self.forwarder.listen(here)

    def namespace(self, name: str) -> str:
        return self.hosts[name]["ns"]

    def address(self, name: str) -> str:
        """Where the database is, seen from host `name`."""
        return self.hosts[name]["address"]

    def port(self, name: str) -> int:
        return self.hosts[name]["port"]

    def database_ports(self, name: str) -> set[int]:
        """pg_stat_activity.client_port of host `name`'s sessions (through the forwarder)."""
        return self.forwarder.upstream_ports(self.address(name))

    def command(self, name: str, argv) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(name), *argv]

    def run(self, name: str, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(name, argv), check=True, capture_output=True, text=True)

    def cut(self, name: str):
        """Partition host `name`: its link down, packets dropped both ways, nothing reset."""
        _ip("link", "set", self.hosts[name]["link"], "down")

    def restore(self, name: str):
        _ip("link", "set", self.hosts[name]["link"], "up")

    def close(self):
        for host in self.hosts.values():
            _ip("netns", "del", host["ns"], check=False)  # takes its end of the pair with it
            _ip("link", "del", host["link"], check=False)  # gone already unless the move failed
        self.hosts.clear()
        self.forwarder.close()


class HostProcesses(Processes):
    """`Processes` whose commands run on a host: `start(..., host="a")` runs
    `manage.py <command>` inside that host's namespace, its DATABASE_URL pointing at the
    database through that host's link. `database_options`: libpq parameters added to it."""

    def __init__(self, tmp_path, hosts: Hosts, *, database_options=None, **kwargs):
        super().__init__(tmp_path, **kwargs)
        self.hosts = hosts
        self.database_options = database_options or {}

    def database_url(self, host: str) -> str:
        from django.db import connection

        sd = connection.settings_dict
        user = sd.get("USER") or "postgres"
        password = f":{quote(sd['PASSWORD'], safe='')}" if sd.get("PASSWORD") else ""
        where = f"{self.hosts.address(host)}:{self.hosts.port(host)}"
        query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in self.database_options.items())
        return f"postgres://{user}{password}@{where}/{sd['NAME']}" + (f"?{query}" if query else "")

    def start(self, *args, host: str, command=None, env=None):
        command = command or self.command
        prefix = self.log_prefix if command == self.command else command
        log = open(self.tmp_path / f"{prefix}-{host}-{len(self.procs)}.log", "w")  # noqa: SIM115
        proc = subprocess.Popen(
            self.hosts.command(host, [sys.executable, "manage.py", command, *args]),
            cwd=BASE_DIR,
            env={**self.env, "DATABASE_URL": self.database_url(host), **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        proc.log_path = log.name
        proc.host = host
        self.procs.append(proc)
        return proc
