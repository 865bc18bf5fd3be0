"""A real multi-node Ray cluster on this machine, for tests and for trying the pool.

Each node is a ``ray start`` of its own (the head, then workers joining it), on its own
loopback address (127.0.0.2, 127.0.0.3 ...: Ray rewrites 127.0.0.1 to the machine's
public interface address, while other loopback aliases are kept), with free ports
picked for every Ray service, and a private ``--temp-dir``. Some Ray services listen
on all interfaces whatever the node address, so the cluster uses Ray's token
authentication with a token of its own (in the temp dir, never ``~/.ray``). Every
process the cluster starts carries a marker in its environment, so
:meth:`LocalCluster.stop` ends exactly these processes by pid (``ray stop`` would end
every Ray process of the machine, including other users' clusters).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import AgentGymError, ConfigError
from agentgym_envs.distributed.procs import marked, terminate

MARKER = "AGENTGYM_RAY_CLUSTER"
_SERVICES = (
    "node-manager-port",
    "object-manager-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "runtime-env-agent-port",
    "metrics-export-port",
)


class ClusterStartError(AgentGymError, RuntimeError):
    """``ray start`` failed; the message carries its output."""


@dataclass(frozen=True)
class NodeSpec:
    """One node of a local cluster.

    Attributes:
        num_cpus: CPUs the node offers to Ray.
        resources: custom resources it offers, e.g. ``{"node2": 1}``.
        object_store_mib: its object store (small: envs pass small messages).
    """

    num_cpus: float = 1
    resources: Mapping[str, float] = field(default_factory=dict)
    object_store_mib: int = 80


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _free_range(size: int = 40) -> tuple[int, int]:
    """``size`` consecutive free ports for a node's worker processes."""
    for _ in range(50):
        base = free_port()
        if base + size >= 65535:
            continue
        if all(_is_free(p) for p in range(base, base + size)):
            return base, base + size - 1
    raise ClusterStartError(f"found no {size} consecutive free ports for Ray workers")


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


class LocalCluster:
    """Start ``nodes`` as a Ray cluster on this machine; :meth:`stop` ends it all.

    Args:
        nodes: the head first, then the workers.
        temp_root: where the private ``--temp-dir`` goes (short: Ray's socket paths
            must fit in 107 characters).
    """

    def __init__(self, nodes: Sequence[NodeSpec], temp_root: str = "/tmp") -> None:
        if not nodes:
            raise ConfigError("a cluster needs at least one node, e.g. [NodeSpec()]")
        self.nodes = list(nodes)
        self.temp_dir = tempfile.mkdtemp(prefix="agr-", dir=temp_root)
        self.port = free_port()
        self.head_ip = "127.0.0.2"
        self.address = f"{self.head_ip}:{self.port}"
        token = Path(self.temp_dir) / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        self.auth_env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
        """What a driver's environment needs to join (:meth:`connect` sets it)."""
        self._env = {
            **os.environ,
            **self.auth_env,
            MARKER: self.temp_dir,
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        self._env.pop("RAY_ADDRESS", None)
        self._saved_env: dict[str, str | None] = {}

    def start(self) -> LocalCluster:
        """Start the head and the workers (a few seconds each). On failure, whatever was
        started is stopped before the error propagates."""
        try:
            for k, node in enumerate(self.nodes):
                self._start_node(k, node)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, k: int, node: NodeSpec) -> None:
        ip = f"127.0.0.{k + 2}"
        low, high = _free_range()
        args = [
            str(Path(sys.executable).with_name("ray")),
            "start",
            f"--node-ip-address={ip}",
            f"--num-cpus={node.num_cpus:g}",
            f"--temp-dir={self.temp_dir}",
            f"--object-store-memory={node.object_store_mib * 2**20}",
            f"--min-worker-port={low}",
            f"--max-worker-port={high}",
            "--disable-usage-stats",
            *(f"--{name}={free_port()}" for name in _SERVICES),
        ]
        if node.resources:
            args.append(f"--resources={json.dumps(dict(node.resources))}")
        if k == 0:
            args += [
                "--head",
                f"--port={self.port}",
                "--include-dashboard=false",
                f"--dashboard-port={free_port()}",
            ]
        else:
            args.append(f"--address={self.address}")
        done = subprocess.run(args, env=self._env, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise ClusterStartError(
                f"`ray start` of node {k} failed (exit {done.returncode}):\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            )

    def connect(self) -> None:
        """Join the cluster from this process as a Ray driver (``ray.init``)."""
        import ray

        for name, value in self.auth_env.items():
            self._saved_env.setdefault(name, os.environ.get(name))
            os.environ[name] = value
        # Ray reads the auth mode once per process; re-read it, as ray.init does when it
        # turns token auth on for a new local cluster
        from ray._raylet import Config  # type: ignore[attr-defined]

        Config.initialize("")
        ray.init(
            address=self.address,
            _node_ip_address=self.head_ip,
            include_dashboard=False,
            log_to_driver=False,
        )

    def disconnect(self) -> None:
        """Leave the cluster (``ray.shutdown``) and restore this process's environment."""
        import ray

        ray.shutdown()
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env.clear()
        from ray._raylet import Config  # type: ignore[attr-defined]

        Config.initialize("")

    def processes(self) -> list[int]:
        """Live processes of this cluster (its Ray services and workers)."""
        return marked(MARKER, self.temp_dir, also_path=self.temp_dir)

    def stop(self) -> list[int]:
        """End every process of the cluster by pid (SIGTERM, then SIGKILL) and remove its
        temp dir. Returns the pids that survived (normally none). Idempotent."""
        left = terminate(self.processes(), grace_s=2.0)
        if not left:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        return left

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
