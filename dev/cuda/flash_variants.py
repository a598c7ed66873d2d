"""Every flash-attention variant on Hopper: the package's (gradcraft/backend/cuda/flash_variants.py's
HOPPER_TILES and DETERMINISTIC_TILES, in kernels/flash_hopper*.cu) and the lab's (flash_hopper_lab.cu,
flash_hopper_bwd_lab.cu beside this file). flash_attention.py's launchers launch any of them by name; lab.py
points them at the lab's kernel files."""

from gradcraft.backend.cuda.flash_variants import (  # noqa: F401  (the kinds, as the launchers name them)
    FUSED,
    FUSED_OVERLAP,
    PERSISTENT,
    PERSISTENT_KINDS,
    PERSISTENT_PINGPONG,
    PERSISTENT_SERIAL,
    PINGPONG,
    PIPELINED,
    PRODUCTION_VARIANTS,
    WARP_SPECIALIZED,
    WARP_SPECIALIZED_SERIAL,
)

# The Hopper kernels' variants, by kernel and head dim: (keys per tile of the forward and of dq, or
# queries per tile of dk/dv; warpgroups of 128 threads per block, each owning 64 of the block's
# queries or keys), and for the forward PIPELINED where the kernel overlaps the next tile's scores
# and the current tile's O += P V with the softmax (three stages of keys and values, flash_hopper.cu's
# _p kernels). dq's FUSED: no dq kernel, the dk/dv kernel (then (64, warpgroups[, blocks[, stages]]))
# adds dQ up itself, where `blocks` (3) names the kernel capped for that many blocks an SM (_b3: fewer
# registers, more warps to hide latency) and `stages` (3) the one staging its query tiles three deep
# (_s3: within 1% of _b3 on the H200, hence not a default); FUSED_OVERLAP: one warpgroup, each step's dQ
# product (at head dim 128 its second half) multiplied at the start of the next step, behind that
# step's first products. The package's kernel files and this folder's *_lab.cu hold exactly these;
# bench/attention_kernels.py times them all, dq's and dk/dv's in pairs, and check_flash_hopper.py checks
# the lab's (tests/test_cuda_attention.py the package's).
# WARP_SPECIALIZED (the forward's _ws kernels): the second number counts consumer warpgroups, each
# owning 64 queries, beside one producer warpgroup that only copies tiles (FlashAttention-3's layout),
# each consumer's loop pipelined; WARP_SPECIALIZED_SERIAL (_wss): the same, one tile at a time.
# PERSISTENT and PERSISTENT_SERIAL (_wsp, _wssp): those two as persistent kernels, one block an SM
# taking query tiles until none is left, the next tile's copies overlapping the current one's end.
# PINGPONG and PERSISTENT_PINGPONG (_ws_pp, _wsp_pp): _ws and _wsp with the consumers issuing their
# products in turns (FlashAttention-3's inter-warpgroup schedule: one's softmax under another's products).
HOPPER_VARIANTS = {
    "fwd": {
        64: (
            (64, 1),
            (64, 2),
            (128, 1),
            (128, 2),
            (64, 1, PIPELINED),
            (64, 2, PIPELINED),
            (128, 2, PIPELINED),
            (128, 2, WARP_SPECIALIZED),
            (128, 3, WARP_SPECIALIZED),
            (128, 2, WARP_SPECIALIZED_SERIAL),
            (128, 3, WARP_SPECIALIZED_SERIAL),
            (128, 2, PERSISTENT),
            (128, 2, PERSISTENT_SERIAL),
            (128, 2, PINGPONG),
            (128, 2, PERSISTENT_PINGPONG),
            (128, 3, PINGPONG),
            (128, 3, PERSISTENT),
            (128, 3, PERSISTENT_PINGPONG),
        ),
        128: (
            (64, 2),
            (128, 1),
            (128, 2),
            (64, 2, PIPELINED),
            (128, 2, PIPELINED),
            (128, 2, WARP_SPECIALIZED),
            (128, 2, WARP_SPECIALIZED_SERIAL),
            (128, 2, PERSISTENT),
            (128, 2, PINGPONG),
            (128, 2, PERSISTENT_PINGPONG),
        ),
    },
    "dq": {
        64: ((64, 1), (64, 2), (128, 1), FUSED, FUSED_OVERLAP, FUSED, FUSED, FUSED),
        128: ((64, 1), (64, 2), FUSED, FUSED_OVERLAP, FUSED, FUSED),
    },
    "dkdv": {
        64: ((64, 1), (64, 2), (128, 1), (64, 1), (64, 1), (64, 1, 3), (64, 1, 3, 3), (128, 2, WARP_SPECIALIZED)),
        128: ((64, 1), (64, 2), (64, 1), (64, 1), (64, 2), (64, 2, WARP_SPECIALIZED)),
    },
}


def lab_only(kernel: str, D: int) -> tuple:
    """The variants of `kernel` ("fwd", or "bwd" for (dq, dk/dv) pairs) at head dim D that the package
    does not build."""
    if kernel == "fwd":
        every = HOPPER_VARIANTS["fwd"][D]
    else:
        every = tuple(zip(HOPPER_VARIANTS["dq"][D], HOPPER_VARIANTS["dkdv"][D]))
    return tuple(v for v in every if v not in PRODUCTION_VARIANTS[kernel][D])
