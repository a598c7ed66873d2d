"""Where the processes of a data-parallel job run: nodes, processes per node, the master's address.

Two ways to say it:
    gradcraft train --nnodes 2 --node_rank 0 --master_addr node0 --master_port 29500 --nproc 8 ...
        (run on each node with its own --node_rank; gradcraft starts the node's --nproc processes)
    torchrun --nnodes 2 --nproc_per_node 8 ... -m gradcraft.cli.main train ...
        (the launcher starts every process and tells it RANK, WORLD_SIZE, LOCAL_RANK,
        LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT: `Topology.from_environment`)

Ranks are numbered node by node: global rank = node_rank x nproc + local rank, and local rank r
uses GPU first + r of its node (first: the index in --device, default 0). Global rank 0 runs on
node 0, listens at the master's address for the others (gradcraft/distributed/rendezvous.py), and
is the one that writes checkpoints and logs.
"""

import os
from dataclasses import dataclass

from gradcraft.errors import UserError

DEFAULT_TIMEOUT_S = 300.0
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass
class Topology:
    nnodes: int = 1
    node_rank: int = 0
    nproc: int = 1  # processes on each node
    master_addr: str = "127.0.0.1"
    master_port: int | None = None  # None: a single host picks a free port of its own
    timeout: float = DEFAULT_TIMEOUT_S  # seconds to wait for every rank at the rendezvous
    started_by: str = "gradcraft"  # or "environment": this process is one rank (torchrun, Slurm scripts)
    local_rank: int = 0  # started_by "environment": this process's rank on its node

    @property
    def world(self) -> int:
        return self.nnodes * self.nproc

    @property
    def rank(self) -> int:
        """Global rank of this process (started_by "environment"; gradcraft's launcher numbers its own)."""
        return self.node_rank * self.nproc + self.local_rank

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1

    def check(self) -> None:
        if self.nnodes < 1 or self.nproc < 1:
            raise UserError(f"--nnodes {self.nnodes} and --nproc {self.nproc} must be positive")
        if not 0 <= self.node_rank < self.nnodes:
            raise UserError(f"--node_rank {self.node_rank} must be in 0..{self.nnodes - 1} for --nnodes {self.nnodes}")
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise UserError(f"--master_port {self.master_port} must be a TCP port, 1..65535")
        if self.nnodes > 1 and self.master_port is None:
            raise UserError(
                f"--nnodes {self.nnodes} needs --master_port (and --master_addr: node 0's address), "
                "the same on every node"
            )
        if not self.timeout > 0:
            raise UserError(f"--rdzv_timeout {self.timeout} must be positive (seconds)")

    @classmethod
    def from_environment(cls, environ=None, timeout: float = DEFAULT_TIMEOUT_S) -> "Topology | None":
        """torchrun's variables, or None when RANK and WORLD_SIZE are not both set."""
        env = os.environ if environ is None else environ
        if "RANK" not in env or "WORLD_SIZE" not in env:
            return None
        values = {}
        for name, default in (
            ("RANK", None),
            ("WORLD_SIZE", None),
            ("LOCAL_RANK", "0"),
            ("LOCAL_WORLD_SIZE", None),
            ("MASTER_PORT", None),
        ):
            text = env.get(name, default)
            if text is None and name == "LOCAL_WORLD_SIZE":
                text = "1" if "LOCAL_RANK" not in env else None
            if text is None:
                raise UserError(
                    f"RANK and WORLD_SIZE are set but {name} is not; a launcher that sets them must set "
                    f"all of {', '.join(TORCHRUN_VARIABLES)} (or unset RANK to train on one host)"
                )
            try:
                values[name] = int(text)
            except ValueError:
                raise UserError(
                    f"the environment variable {name}={text!r} is not a whole number; fix the launcher's settings"
                ) from None
        addr = env.get("MASTER_ADDR")
        if not addr:
            raise UserError("RANK and WORLD_SIZE are set but MASTER_ADDR is not; set it to global rank 0's host")
        world, local_world, rank, local = (
            values["WORLD_SIZE"],
            values["LOCAL_WORLD_SIZE"],
            values["RANK"],
            values["LOCAL_RANK"],
        )
        if world < 1 or local_world < 1 or world % local_world:
            raise UserError(
                f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local_world} (every node "
                "must run the same number of processes)"
            )
        if not 0 <= rank < world or not 0 <= local < local_world or rank % local_world != local:
            raise UserError(
                f"RANK={rank} with LOCAL_RANK={local} does not fit WORLD_SIZE={world}, "
                f"LOCAL_WORLD_SIZE={local_world} (ranks must be numbered node by node)"
            )
        topology = cls(
            nnodes=world // local_world,
            node_rank=rank // local_world,
            nproc=local_world,
            master_addr=addr,
            master_port=values["MASTER_PORT"],
            timeout=timeout,
            started_by="environment",
            local_rank=local,
        )
        topology.check()
        return topology
