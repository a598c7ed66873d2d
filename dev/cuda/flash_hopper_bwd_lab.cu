// The lab's Hopper backward kernels: every flash-attention backward variant of dev/cuda/flash_variants.py
// that gradcraft does not run (the package's kernels/flash_hopper_bwd.cu holds the ones it does:
// flash_variants.HOPPER_TILES and DETERMINISTIC_TILES). It includes that file, whose dq, dk/dv and fused
// kernel templates these instantiate at other tile sizes. Build and check: dev/cuda/README.md.
#include "flash_hopper_bwd.cu"

#if defined(FH_ENABLED)
#define FHB_FUSED_BODY(BF, D, OVERLAP, WGS, STAGES) \
    hopper_bwd_dkdv<BF, D, 64, WGS, true, OVERLAP, STAGES>(q, k, v, dout, lse, dvec, dk, dv, dq_acc, FHB_SHAPE_ARGS);
#else
#define FHB_FUSED_BODY(BF, D, OVERLAP, WGS, STAGES)
#endif  // FH_ENABLED

// hopper_bwd_fused[_overlap]_{bf16,f16}_d{D}_m64_w{WGS}[_b3[_s3]]: dk/dv's arguments and dq_acc (float32,
// zeroed); 64 WGS keys a block. _b3 (head dim 64, not overlapped: that one would spill and serialise its
// wgmma): registers capped at 168 a thread, for three blocks an SM; _s3: the query tiles staged three
// deep (73.5 KB of shared memory, three blocks still fit). w2: head dim 128, not overlapped.
// Then flash_hopper_bwd.cu's hopper_bwd_dq_convert writes dq.
#define FHB_FUSED_ONE(NAME, BF, D, KIND, OVERLAP, WGS, MINB, STAGES, TAIL)                                          \
    extern "C" __global__ void __launch_bounds__(FH_WARPGROUP * WGS, MINB)                                          \
        hopper_bwd_##KIND##_##NAME##_d##D##_m64_w##WGS##TAIL(FHB_INPUTS, u16* dk, u16* dv, float* dq_acc, FHB_SHAPE) { \
        FHB_FUSED_BODY(BF, D, OVERLAP, WGS, STAGES)                                                                 \
    }
#define FHB_FUSED(NAME, BF, D) \
    FHB_FUSED_ONE(NAME, BF, D, fused, false, 1, 1, 2, ) FHB_FUSED_ONE(NAME, BF, D, fused_overlap, true, 1, 1, 2, )
// flash_hopper_bwd.cu's FHB_DQ and FHB_DKDV at the tile sizes it does not build, and the fused kernels
// without warp specialisation
#define FHB_LAB_ALL(NAME, BF)                                                                                    \
    FHB_DQ(NAME, BF, 64, 64, 2) FHB_DQ(NAME, BF, 64, 128, 1) FHB_DQ(NAME, BF, 128, 64, 2)                        \
        FHB_DKDV(NAME, BF, 64, 64, 2) FHB_DKDV(NAME, BF, 64, 128, 1) FHB_DKDV(NAME, BF, 128, 64, 2)              \
            FHB_FUSED(NAME, BF, 64) FHB_FUSED(NAME, BF, 128) FHB_FUSED_ONE(NAME, BF, 64, fused, false, 1, 3, 2, _b3) \
                FHB_FUSED_ONE(NAME, BF, 64, fused, false, 1, 3, 3, _b3_s3)                                       \
                    FHB_FUSED_ONE(NAME, BF, 128, fused, false, 2, 1, 2, )
FHB_LAB_ALL(bf16, true)
FHB_LAB_ALL(f16, false)
