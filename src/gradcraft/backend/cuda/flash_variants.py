"""The flash-attention kernels' variants on Hopper (flash_hopper.cu, flash_hopper_bwd.cu): the names of
their kinds, which flash_attention.py's launchers read, and the variants it runs, which are the
ones the package's kernel files hold. The other variants, the kernels that build them and their
checks are in dev/cuda (dev/cuda/flash_variants.py's HOPPER_VARIANTS). No CuPy here: a table only."""

HOPPER_DIMS = (64, 128)
# A variant, by kernel and head dim: (keys per tile of the forward and of dq, or queries per tile of
# dk/dv; warpgroups of 128 threads per block, each owning 64 of the block's queries or keys[, kind]).
# dq's FUSED: no dq kernel, the dk/dv kernel adds dQ up itself (in float32, then converted).
# WARP_SPECIALIZED (_ws kernels): the second number counts consumer warpgroups, each owning 64 queries
# (or keys), beside one producer warpgroup that only copies tiles (FlashAttention-3's layout).
# PERSISTENT (_wsp): the warp-specialised forward as a persistent kernel, one block an SM taking query
# tiles until none is left, the next tile's copies overlapping the current one's end.
# The launchers also name the lab's kinds (dev/cuda/flash_variants.py describes them): PIPELINED (_p),
# WARP_SPECIALIZED_SERIAL (_wss), PERSISTENT_SERIAL (_wssp), PINGPONG (_ws_pp), PERSISTENT_PINGPONG
# (_wsp_pp), FUSED_OVERLAP.
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
# The variant each kernel runs: the fastest on the H200 over T 512-8192 (dev/cuda/flash_variants.py's
# HOPPER_VARIANTS, timed by bench/attention_kernels.py): the persistent warp-specialised forward at head
# dim 128 (1-4% ahead of _ws up to T 4096, level at 8192), and the warp-specialised fused backward at
# both head dims (at 64 6-30% ahead of _b3 from T 1024, 4% behind at T 512: with the mask tested once a
# tile, its exponentials are cheap).
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
# What the package's kernel files hold, by head dim: the forward variants, and the backward's
# (dq, dk/dv) pairs (tests/test_cuda_attention.py runs each).
PRODUCTION_VARIANTS = {
    "fwd": {D: (HOPPER_TILES["fwd"][D],) for D in HOPPER_DIMS},
    "bwd": {D: ((HOPPER_TILES["dq"][D], HOPPER_TILES["dkdv"][D]), DETERMINISTIC_TILES[D]) for D in HOPPER_DIMS},
}
