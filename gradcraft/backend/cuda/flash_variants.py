"""The flash-attention kernels' variants on Hopper (flash_hopper.cu, flash_hopper_bwd.cu): their names,
the table of every variant the kernel files hold (which bench/attention_kernels.py times and
tests/test_cuda_attention.py tests), and the ones attention.py runs. No CuPy here: a table only."""

HOPPER_DIMS = (64, 128)
# The Hopper kernels' variants, by kernel and head dim: (keys per tile of the forward and of dq, or
# queries per tile of dk/dv; warpgroups of 128 threads per block, each owning 64 of the block's
# queries or keys), and for the forward PIPELINED where the kernel overlaps the next tile's scores
# and the current tile's O += P V with the softmax (three stages of keys and values, flash_hopper.cu's
# _p kernels). dq's FUSED: no dq kernel, the dk/dv kernel (then (64, warpgroups[, blocks[, stages]]))
# adds dQ up itself, where `blocks` (3) names the kernel capped for that many blocks an SM (_b3: fewer
# registers, more warps to hide latency) and `stages` (3) the one staging its query tiles three deep
# (_s3: within 1% of _b3 on the H200, hence not a default); FUSED_OVERLAP: one warpgroup, each step's dQ
# product (at head dim 128 its second half) multiplied at the start of the next step, behind that
# step's first products. The kernel files hold exactly these; bench/attention_kernels.py times them all,
# dq's and dk/dv's in pairs, and tests/test_cuda_attention.py tests each.
# WARP_SPECIALIZED (the forward's _ws kernels): the second number counts consumer warpgroups, each
# owning 64 queries, beside one producer warpgroup that only copies tiles (FlashAttention-3's layout),
# each consumer's loop pipelined; WARP_SPECIALIZED_SERIAL (_wss): the same, one tile at a time.
# PERSISTENT and PERSISTENT_SERIAL (_wsp, _wssp): those two as persistent kernels, one block an SM
# taking query tiles until none is left, the next tile's copies overlapping the current one's end.
# PINGPONG and PERSISTENT_PINGPONG (_ws_pp, _wsp_pp): _ws and _wsp with the consumers issuing their
# products in turns (FlashAttention-3's inter-warpgroup schedule: one's softmax under another's products).
FUSED, FUSED_OVERLAP, PIPELINED = "fused", "fused_overlap", "pipelined"
WARP_SPECIALIZED, WARP_SPECIALIZED_SERIAL = "ws", "wss"
PERSISTENT, PERSISTENT_SERIAL = "wsp", "wssp"
PINGPONG, PERSISTENT_PINGPONG = "ws_pp", "wsp_pp"
WARP_SPECIALIZED_KINDS = (
    WARP_SPECIALIZED,
    WARP_SPECIALIZED_SERIAL,
    PERSISTENT,
    PERSISTENT_SERIAL,
    PINGPONG,
    PERSISTENT_PINGPONG,
)
PERSISTENT_KINDS = (PERSISTENT, PERSISTENT_SERIAL, PERSISTENT_PINGPONG)
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
# The variant each kernel runs: the fastest on the H200 over T 512-8192 (bench/attention_kernels.py
# times every variant): the persistent warp-specialised forward at head dim 128 (1-4% ahead of _ws up to
# T 4096, level at 8192), and the warp-specialised fused backward at both head dims (at 64 6-30% ahead
# of _b3 from T 1024, 4% behind at T 512: with the mask tested once a tile, its exponentials are cheap).
# A None in dq's or dk/dv's would keep the backward on the mma.sync kernels.
# The fused backward adds dQ up with float32 atomics, whose order varies from run
# to run; GRADCRAFT_DETERMINISTIC=1 runs DETERMINISTIC_TILES instead, the separate dq kernel (the
# fastest unfused pair), for a backward that gives the same bits every time (as PyTorch's
# use_deterministic_algorithms rules out its atomic backward kernels).
HOPPER_TILES = {
    "fwd": {64: (128, 1), 128: (128, 2, PERSISTENT)},
    "dq": {64: FUSED, 128: FUSED},
    "dkdv": {64: (128, 2, WARP_SPECIALIZED), 128: (64, 2, WARP_SPECIALIZED)},
}
DETERMINISTIC_TILES = {64: ((64, 1), (64, 1)), 128: ((64, 1), (64, 1))}
