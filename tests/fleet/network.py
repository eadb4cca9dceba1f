"""The fleet's network: one network namespace per host, each joined by a veth pair to a bridge that
lives in a namespace of its own, so nothing of the fleet (address, link, rule) is ever made in the
machine's own namespace, and a private range is used only inside these namespaces.

Faults on the wire are iptables rules inside a worker's namespace (the kernel here has nftables and
the ``NFQUEUE`` target, not ``netem``): a partition drops, silently and both ways, every packet between
the worker and one server's port (a pulled cable for that path); a slow, lossy link drops a share of
the packets at random and queues the rest to ``tests.fleet.delayer``, which holds each one for a
random delay (so packets overtake each other: delay, loss and reordering).
"""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass, field

PREFIX = "sfleet-"
BRIDGE_NS = f"{PREFIX}net"
SUBNET = "10.46.0"  # only ever inside the fleet's own namespaces
IPTABLES = "iptables-legacy"
DELAY_QUEUE = 46


@dataclass(frozen=True)
class Host:
    name: str
    index: int

    @property
    def ns(self) -> str:
        return f"{PREFIX}{self.name}"

    @property
    def ip(self) -> str:
        return f"{SUBNET}.{self.index}"

    def exec_prefix(self) -> list[str]:
        """What a command is prefixed with to run on this host."""
        return ["ip", "netns", "exec", self.ns]


HOSTS = {
    "db": Host("db", 2),
    "provider": Host("provider", 3),
    "client": Host("client", 4),
    "worker-a": Host("worker-a", 11),
    "worker-b": Host("worker-b", 12),
}


def sh(*args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), check=check, timeout=timeout, capture_output=True, text=True)


def fleet_namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def remove_all() -> None:
    """Delete every namespace of the fleet (their veths, rules and bridge go with them). Processes
    still inside one keep it alive: the hosts' processes are stopped first (hosts.stop_leftovers)."""
    for ns in fleet_namespaces():
        sh("ip", "netns", "delete", ns, check=False)


@dataclass
class Network:
    hosts: dict[str, Host] = field(default_factory=lambda: dict(HOSTS))
    # per worker namespace: the active rule sets, by fault name -> (chain, rule args) list
    active: dict[str, dict[str, list[list[str]]]] = field(default_factory=dict)

    def build(self) -> None:
        remove_all()
        sh("ip", "netns", "add", BRIDGE_NS)
        sh("ip", "-n", BRIDGE_NS, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", BRIDGE_NS, "link", "set", "br0", "up")
        for host in self.hosts.values():
            sh("ip", "netns", "add", host.ns)
            port = f"p{host.index}"
            sh(
                "ip",
                "-n",
                BRIDGE_NS,
                "link",
                "add",
                port,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                host.ns,
            )
            sh("ip", "-n", BRIDGE_NS, "link", "set", port, "master", "br0")
            sh("ip", "-n", BRIDGE_NS, "link", "set", port, "up")
            sh("ip", "-n", host.ns, "addr", "add", f"{host.ip}/24", "dev", "eth0")
            sh("ip", "-n", host.ns, "link", "set", "eth0", "up")
            sh("ip", "-n", host.ns, "link", "set", "lo", "up")

    def close(self) -> None:
        remove_all()

    # -- faults on the wire ------------------------------------------------------------------------
    def _apply(self, host: Host) -> None:
        """Rewrite the host's rules from ``active`` (flush, then every active fault's rules)."""
        prefix = ["ip", "netns", "exec", host.ns, IPTABLES]
        sh(*prefix, "-F", "OUTPUT")
        sh(*prefix, "-F", "INPUT")
        for rules in self.active.get(host.name, {}).values():
            for chain, *rule in rules:
                sh(*prefix, "-A", chain, *rule)

    def partition(self, worker: str, server: str, port: int) -> None:
        """Cut ``worker`` from ``server:port``: every packet of that path dropped, both ways."""
        host, ip = self.hosts[worker], self.hosts[server].ip
        self.active.setdefault(worker, {})[f"cut {server}:{port}"] = [
            ["OUTPUT", "-d", ip, "-p", "tcp", "--dport", str(port), "-j", "DROP"],
            ["INPUT", "-s", ip, "-p", "tcp", "--sport", str(port), "-j", "DROP"],
        ]
        self._apply(host)

    def heal(self, worker: str, server: str, port: int) -> None:
        self.active.get(worker, {}).pop(f"cut {server}:{port}", None)
        self._apply(self.hosts[worker])

    def degrade(self, worker: str, server: str, loss: float) -> None:
        """A slow, lossy, reordering path between ``worker`` and ``server`` (the delayer must run on
        ``worker``: see ``hosts``); ``loss`` is the share of packets dropped each way."""
        host, ip = self.hosts[worker], self.hosts[server].ip
        drop = ["-m", "statistic", "--mode", "random", "--probability", f"{loss:.3f}", "-j", "DROP"]
        queue = ["-j", "NFQUEUE", "--queue-num", str(DELAY_QUEUE), "--queue-bypass"]
        self.active.setdefault(worker, {})[f"slow {server}"] = [
            ["OUTPUT", "-d", ip, *drop],
            ["INPUT", "-s", ip, *drop],
            ["OUTPUT", "-d", ip, *queue],
            ["INPUT", "-s", ip, *queue],
        ]
        self._apply(host)

    def restore(self, worker: str, server: str) -> None:
        self.active.get(worker, {}).pop(f"slow {server}", None)
        self._apply(self.hosts[worker])

    def heal_all(self) -> None:
        for worker in list(self.active):
            self.active[worker].clear()
            with contextlib.suppress(subprocess.SubprocessError):
                self._apply(self.hosts[worker])
