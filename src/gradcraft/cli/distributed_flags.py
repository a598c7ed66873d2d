"""`gradcraft train`'s flags for data parallelism across processes and machines, and how they (or
torchrun's environment) become a gradcraft.distributed.Topology. docs/distributed.md explains them."""

import os

from gradcraft.cli.common import non_negative_int, port, positive_float, positive_int
from gradcraft.errors import UserError

LAUNCH_FLAGS = ("nnodes", "node_rank", "master_addr", "master_port")


def add_distributed_arguments(parser) -> None:
    from gradcraft.distributed.topology import DEFAULT_TIMEOUT_S
    from gradcraft.training.config import TrainConfig

    bucket_default = TrainConfig.__dataclass_fields__["bucket_mb"].default
    group = parser.add_argument_group(
        "several machines (or torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT "
        "instead); see docs/distributed.md"
    )
    group.add_argument(
        "--nnodes", type=positive_int, help="machines in the job, each running --nproc processes (default: 1)"
    )
    group.add_argument(
        "--node_rank",
        type=non_negative_int,
        help="this machine's index, 0..nnodes-1; node 0 writes the run (default: 0)",
    )
    group.add_argument("--master_addr", help="node 0's address, where the processes meet (default: 127.0.0.1)")
    group.add_argument(
        "--master_port",
        type=port,
        help="a free TCP port on node 0, the same on every node (default with one node: any free port)",
    )
    group.add_argument(
        "--rdzv_timeout",
        type=positive_float,
        default=None,
        help=f"seconds to wait for every process to arrive (default: {DEFAULT_TIMEOUT_S:g})",
    )
    group.add_argument(
        "--bucket_mb",
        type=positive_float,
        help="gradients are summed over the processes in buckets of this many MB, while backward runs "
        f"(default: {bucket_default:g})",
    )
    group.add_argument(
        "--zero",
        action="store_true",
        default=None,
        help="ZeRO-1: each process keeps the AdamW state of 1/world of the weights (prints the "
        "memory saved); checkpoints stay whole (default: off)",
    )


def topology_from_args(args, environ=None):
    """The job's layout from the flags or torchrun's environment; None for this host alone (--nproc
    processes of its own, as without these flags)."""
    from gradcraft.distributed.topology import DEFAULT_TIMEOUT_S, Topology

    env = os.environ if environ is None else environ
    timeout = args.rdzv_timeout if args.rdzv_timeout is not None else DEFAULT_TIMEOUT_S
    given = [f"--{name}" for name in LAUNCH_FLAGS if getattr(args, name) is not None]
    from_env = Topology.from_environment(env, timeout)
    if from_env is not None:
        if given:
            raise UserError(
                f"{', '.join(given)} given while RANK and WORLD_SIZE are set (a launcher such as "
                "torchrun started this process): give one or the other"
            )
        if args.nproc is not None and args.nproc != from_env.nproc:
            raise UserError(
                f"--nproc {args.nproc} differs from LOCAL_WORLD_SIZE={from_env.nproc}: under torchrun "
                "the launcher starts the processes; drop --nproc"
            )
        return from_env if from_env.world > 1 else None
    if not given:
        if args.rdzv_timeout is not None and not args.rdzv_timeout > 0:
            raise UserError(f"--rdzv_timeout {args.rdzv_timeout} must be positive (seconds)")
        return None
    topology = Topology(
        nnodes=args.nnodes if args.nnodes is not None else 1,
        node_rank=args.node_rank if args.node_rank is not None else 0,
        nproc=args.nproc if args.nproc is not None else 1,
        master_addr=args.master_addr or "127.0.0.1",
        master_port=args.master_port,
        timeout=timeout,
    )
    topology.check()
    return topology


def is_writer(topology) -> bool:
    """Whether this command's processes include global rank 0, which writes the run folder."""
    if topology is None:
        return True
    return topology.rank == 0 if topology.started_by == "environment" else topology.node_rank == 0
