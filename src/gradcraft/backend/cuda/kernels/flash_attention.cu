// Flash attention on tensor cores: softmax(q k^T * scale + causal/window mask) v, forward and backward,
// without ever storing the (T, S) matrix (Dao, "FlashAttention-2", 2023).
//
// Layouts: q (B, H, T, D), k and v (B, Hkv, S, D), any strides over (B, heads, positions) but the last
// axis contiguous and rows 16-byte aligned (the Python side copies otherwise). Query head h reads key/value
// head h / (H / Hkv) (grouped-query attention). The causal mask aligns the T queries with the last T of
// the S keys: query i sees key j when j <= i + S - T (and j > i + S - T - window with a window).
// Outputs: o (B, H, T, D) and dq, dk, dv (the inputs' shapes) written through strides (the launcher lays
// them out as (B, T, H, D), so that the model's transpose back to (B, T, H * D) is free), and
// lse (B, H, T) = log sum_j exp(scale q_i.k_j) in float32, contiguous, kept for the backward pass.
//
// Every kernel runs 4 warps; a warp owns 16 rows (queries, or keys in the dk/dv kernel) and sweeps tiles
// of the other side that the block stages in shared memory with cp.async. Products use
// mma.sync.m16n8k16 (bf16 or fp16 in, float32 accumulate); a product's float32 result tile is laid out
// in registers exactly as the next product's A operand wants it, so the probabilities P never leave
// registers. Softmax runs in base 2 on scores pre-multiplied by scale * log2(e).
//
// Kernel names: flash_{fwd,bwd_dq,bwd_dkdv}_[dropout_]{bf16,f16}_d{32,48,64,96,128}, flash_bwd_dot_{bf16,f16}.
// The dropout_ kernels drop attention weights with Philox masks (philox.cuh AttnDropout, backend/philox.py).
#include "common.cuh"
#include "flash.cuh"
#include "philox.cuh"
#include "row_store.cuh"

#define FA_THREADS 128
#define FA_PAD 8  // u16 elements of padding per shared-memory row: ldmatrix rows land in distinct banks

// ---------------------------------------------------------------- PTX wrappers

__device__ __forceinline__ void ldsm4(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm4t(u32* r, u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// c (16x8, float32) += a (16x16) b (16x8)
template <bool BF16> __device__ __forceinline__ void mma(float* c, const u32* a, u32 b0, u32 b1);
template <> __device__ __forceinline__ void mma<true>(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma<false>(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <bool BF16> __device__ __forceinline__ float load16(u16 bits) {
    if (BF16) return __uint_as_float(((u32)bits) << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
}

// ---------------------------------------------------------------- tiles and fragments

// ROWS rows of D values from global rows row0.. (stride `stride` elements) into shared rows of D + FA_PAD.
template <int D, int ROWS>
__device__ __forceinline__ void load_tile(u16* s, const u16* g, i64 stride, int row0, int rows) {
    constexpr int CHUNKS = D / 8, LD = D + FA_PAD;
    for (int idx = threadIdx.x; idx < ROWS * CHUNKS; idx += FA_THREADS) {
        int r = idx / CHUNKS, c = idx - r * CHUNKS, row = row0 + r;
        bool ok = row >= 0 && row < rows;
        cp_async16(smem_u32(s + r * LD + c * 8), ok ? g + (i64)row * stride + c * 8 : g, ok ? 16 : 0);
    }
}

// The A operand (16x16) at rows r0.., columns c0.. of a row-major shared matrix.
template <int LD> __device__ __forceinline__ void load_a(u32* a, const u16* s, int r0, int c0) {
    int l = threadIdx.x & 31;
    ldsm4(a, smem_u32(s + (r0 + (l & 15)) * LD + c0 + (l >> 4) * 8));
}
// B operands of the n-tiles n0.. and n0+8.. at k-step k0, from a matrix stored [n][k] (b[0..1]: first
// tile, b[2..3]: second).
template <int LD> __device__ __forceinline__ void load_b_nk(u32* b, const u16* s, int n0, int k0) {
    int l = threadIdx.x & 31;
    ldsm4(b, smem_u32(s + (n0 + (l & 7) + ((l >> 4) << 3)) * LD + k0 + ((l >> 3) & 1) * 8));
}
// The same from a matrix stored [k][n] (a transposing load).
template <int LD> __device__ __forceinline__ void load_b_kn(u32* b, const u16* s, int k0, int n0) {
    int l = threadIdx.x & 31;
    ldsm4t(b, smem_u32(s + (k0 + (l & 7) + (((l >> 3) & 1) << 3)) * LD + n0 + (l >> 4) * 8));
}

// One k-step of the products below: acc (16 x N) += a (the A fragment of columns k0..k0+15) times the
// same columns of B^T, B stored [N][D] (row length LD) in shared memory.
template <bool BF16, int LD, int N>
__device__ __forceinline__ void gemm_rows_kstep(float (*acc)[4], const u32* a, const u16* sb, int k0) {
#pragma unroll
    for (int np = 0; np < N / 16; ++np) {
        u32 b[4];
        load_b_nk<LD>(b, sb, np * 16, k0);
        mma<BF16>(acc[2 * np], a, b[0], b[1]);
        mma<BF16>(acc[2 * np + 1], a, b[2], b[3]);
    }
}
// acc (16 x N) += A (16 x D, fragments in registers) times B^T, B stored [N][D] in shared memory.
template <bool BF16, int D, int N>
__device__ __forceinline__ void gemm_rows(float (*acc)[4], const u32 (*af)[4], const u16* sb) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) gemm_rows_kstep<BF16, D + FA_PAD, N>(acc, af[kk], sb, kk * 16);
}
// The same with A read from shared memory (rows r0.. of a [rows][D] matrix).
template <bool BF16, int D, int N>
__device__ __forceinline__ void gemm_rows_s(float (*acc)[4], const u16* sa, int r0, const u16* sb) {
    constexpr int LD = D + FA_PAD;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        u32 a[4];
        load_a<LD>(a, sa, r0, kk * 16);
        gemm_rows_kstep<BF16, LD, N>(acc, a, sb, kk * 16);
    }
}
// out (16 x D) += P (16 x K, float32 result tiles, rounded here) times V, V stored [K][D] in shared memory.
template <bool BF16, int K, int D>
__device__ __forceinline__ void gemm_pv(float (*out)[4], float (*p)[4], const u16* sv) {
    constexpr int LD = D + FA_PAD;
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
        u32 a[4] = {pack2<BF16>(p[2 * kk][0], p[2 * kk][1]), pack2<BF16>(p[2 * kk][2], p[2 * kk][3]),
                    pack2<BF16>(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack2<BF16>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int np = 0; np < D / 16; ++np) {
            u32 b[4];
            load_b_kn<LD>(b, sv, kk * 16, np * 16);
            mma<BF16>(out[2 * np], a, b[0], b[1]);
            mma<BF16>(out[2 * np + 1], a, b[2], b[3]);
        }
    }
}

// c[mt][n] += a[mt] (b[0], b[1]) and c[mt][n + 1] += a[mt] (b[2], b[3]) for the forward kernel's two
// 16-row tiles mt: each pair of B operands read from shared memory feeds four products.
template <bool BF16, int N>
__device__ __forceinline__ void mma_two_tiles(float (*c)[N][4], const u32 (*a)[4], const u32* b, int n) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
        mma<BF16>(c[mt][n], a[mt], b[0], b[1]);
        mma<BF16>(c[mt][n + 1], a[mt], b[2], b[3]);
    }
}

template <int N> __device__ __forceinline__ void zero(float (*acc)[4]) {
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
}

// Attention dropout of a warp's 16 x (8 NT) result tile whose rows are queries (16 from `row0`, a
// global head-row index bh * T + i) and columns keys (8-key groups from `group0`): the lanes draw the
// tile's 2 NT masks of 8 keys, one each per pair of column tiles, and pass each thread its bits.
template <int NT>
__device__ __forceinline__ void drop_rows(float (*s)[4], const AttnDropout& drop, i64 row0, i64 groups, int group0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
        const u32 bits = drop.keep8((u64)((row0 + (lane & 15)) * groups + group0 + 2 * np + (lane >> 4)));
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const u32 top = __shfl_sync(0xffffffffu, bits, g + 16 * half) >> (2 * tq);
            const u32 bottom = __shfl_sync(0xffffffffu, bits, g + 8 + 16 * half) >> (2 * tq);
            float* c = s[2 * np + half];
            c[0] = (top & 1u) ? c[0] * drop.scale : 0.f;
            c[1] = (top & 2u) ? c[1] * drop.scale : 0.f;
            c[2] = (bottom & 1u) ? c[2] * drop.scale : 0.f;
            c[3] = (bottom & 2u) ? c[3] * drop.scale : 0.f;
        }
    }
}

// The same for a transposed tile (the dk/dv kernel's): rows are 16 keys (two 8-key groups from
// `group0`), columns queries (8 MT, global head-row indices from `row0`).
template <int MT>
__device__ __forceinline__ void drop_cols(float (*s)[4], const AttnDropout& drop, i64 row0, i64 groups, i64 group0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, tq = lane & 3;
#pragma unroll
    for (int mp = 0; mp < MT / 2; ++mp) {
        // lane: query (lane & 7) of column tile 2 mp + (lane >> 4), key group (lane >> 3) & 1
        const u32 bits = drop.keep8((u64)((row0 + (2 * mp + (lane >> 4)) * 8 + (lane & 7)) * groups + group0 +
                                          ((lane >> 3) & 1)));
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int src = 16 * half + 2 * tq;
            const u32 k0q0 = __shfl_sync(0xffffffffu, bits, src) >> g;
            const u32 k0q1 = __shfl_sync(0xffffffffu, bits, src + 1) >> g;
            const u32 k1q0 = __shfl_sync(0xffffffffu, bits, src + 8) >> g;
            const u32 k1q1 = __shfl_sync(0xffffffffu, bits, src + 9) >> g;
            float* c = s[2 * mp + half];
            c[0] = (k0q0 & 1u) ? c[0] * drop.scale : 0.f;
            c[1] = (k0q1 & 1u) ? c[1] * drop.scale : 0.f;
            c[2] = (k1q0 & 1u) ? c[2] * drop.scale : 0.f;
            c[3] = (k1q1 & 1u) ? c[3] * drop.scale : 0.f;
        }
    }
}

#define FWD_BLOCK_M 128  // queries per block of the forward kernel
#define FWD_BLOCK_N(D) ((D) >= 128 ? 32 : 64)  // keys per tile of the forward kernel (registers allow)
#define FWD_Q_IN_REGS(D) ((D) <= 64)

// ---------------------------------------------------------------- forward
// A block owns 128 queries: warp w the rows w*16.. and 64 + w*16.. (two 16-row tiles, so each key and
// value fragment read from shared memory feeds four products: ldmatrix bandwidth, not the tensor
// cores, is what limits a warp with one tile). Queries stay in registers where they fit (d <= 64).

template <bool BF16, int D, bool DROP>
__device__ __forceinline__ void flash_fwd(const u16* __restrict__ q, const u16* __restrict__ k,
                                          const u16* __restrict__ v, u16* __restrict__ o, float* __restrict__ lse,
                                          i64 qsb, i64 qsh, i64 qst, i64 ksb, i64 ksh, i64 kst, i64 vsb, i64 vsh,
                                          i64 vst, i64 osb, i64 osh, i64 ost, int H, int Hkv, int T, int S,
                                          float scale, int causal, int window, const AttnDropout drop) {
    constexpr int BM = FWD_BLOCK_M, BN = FWD_BLOCK_N(D), LD = D + FA_PAD, KS = D / 16, NT = BN / 8, DT = D / 8;
    constexpr bool Q_IN_REGS = FWD_Q_IN_REGS(D);
    extern __shared__ __align__(16) u16 smem[];
    u16* sq = smem;
    u16* sk = sq + BM * LD;
    u16* sv = sk + BN * LD;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const QueryTile tile(Mask{T, S, S - T, causal, window}, BM, BN, H, Hkv, D);
    const int m0 = tile.m0, b = tile.b, h = tile.h, t_begin = tile.t_begin, t_end = tile.t_end;
    const u16 *kb = tile.kv(k, ksb, ksh), *vb = tile.kv(v, vsb, vsh);

    load_tile<D, BM>(sq, q + b * qsb + h * qsh, qst, m0, T);
    if (t_begin < t_end) load_tile<D, BN>(sk, kb, kst, t_begin * BN, S);
    cp_commit();
    u32 qf[Q_IN_REGS ? 2 : 1][Q_IN_REGS ? KS : 1][4];
    if (Q_IN_REGS) {
        cp_wait<0>();
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int kk = 0; kk < KS; ++kk) load_a<LD>(qf[Q_IN_REGS ? mt : 0][Q_IN_REGS ? kk : 0], sq, mt * 64 + warp * 16, kk * 16);
    }

    float acc[2][DT][4];
    zero<DT>(acc[0]);
    zero<DT>(acc[1]);
    float row_max[2][2], row_sum[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) row_max[mt][0] = row_max[mt][1] = neg_inf<float>(), row_sum[mt][0] = row_sum[mt][1] = 0.f;
    const float scale2 = scale * LOG2E;

    for (int t = t_begin; t < t_end; ++t) {
        const int n0 = t * BN;
        load_tile<D, BN>(sv, vb, vst, n0, S);
        cp_commit();
        cp_wait<1>();  // the key tile (and the query tile) have landed
        __syncthreads();
        float s[2][NT][4];
        zero<NT>(s[0]);
        zero<NT>(s[1]);
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
            u32 a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                if (Q_IN_REGS) {
#pragma unroll
                    for (int i = 0; i < 4; ++i) a[mt][i] = qf[Q_IN_REGS ? mt : 0][Q_IN_REGS ? kk : 0][i];
                } else {
                    load_a<LD>(a[mt], sq, mt * 64 + warp * 16, kk * 16);
                }
            }
#pragma unroll
            for (int np = 0; np < NT / 2; ++np) {
                u32 bf[4];
                load_b_nk<LD>(bf, sk, np * 16, kk * 16);
                mma_two_tiles<BF16>(s, a, bf, 2 * np);
            }
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
            const int row0 = m0 + mt * 64 + warp * 16 + g;  // this thread's rows: row0 and row0 + 8
            const int tile_m0 = m0 + mt * 64 + warp * 16;
            if (!tile.mask.full(tile_m0, tile_m0 + 16, n0, n0 + BN))
                mask_rows<NT>(s[mt], tile.mask, row0, n0, tq, neg_inf<float>());
            // Online softmax: rescale what was summed so far to the new row maximum. Scores stay
            // unscaled (scale > 0 keeps the maximum where it is); each exponent is one fma and one ex2.
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float mx = neg_inf<float>();
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
                mx = fmaxf(mx * scale2, row_max[mt][r]);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float base = mx == neg_inf<float>() ? 0.f : mx;  // a row with nothing visible yet
                const float alpha = fast_exp2(row_max[mt][r] - base);
                row_max[mt][r] = mx;
                row_sum[mt][r] *= alpha;
#pragma unroll
                for (int dt = 0; dt < DT; ++dt) {
                    acc[mt][dt][2 * r] *= alpha;
                    acc[mt][dt][2 * r + 1] *= alpha;
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    float p0 = fast_exp2(fmaf(s[mt][nt][2 * r], scale2, -base));
                    float p1 = fast_exp2(fmaf(s[mt][nt][2 * r + 1], scale2, -base));
                    s[mt][nt][2 * r] = p0;
                    s[mt][nt][2 * r + 1] = p1;
                    row_sum[mt][r] += p0 + p1;
                }
            }
            if (DROP) drop_rows<NT>(s[mt], drop, ((i64)b * H + h) * T + tile_m0, (S + 7) / 8, n0 / 8);
        }
        cp_wait<0>();  // the value tile has landed, and (after the barrier) every warp is done with sk
        __syncthreads();
        if (t + 1 < t_end) load_tile<D, BN>(sk, kb, kst, n0 + BN, S);
        cp_commit();
        // acc += P V, both row tiles per value fragment
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            u32 a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                a[mt][0] = pack2<BF16>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = pack2<BF16>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = pack2<BF16>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = pack2<BF16>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int np = 0; np < DT / 2; ++np) {
                u32 bf[4];
                load_b_kn<LD>(bf, sv, kk * 16, np * 16);
                mma_two_tiles<BF16>(acc, a, bf, 2 * np);
            }
        }
        __syncthreads();  // every warp is done with sv before the next value tile
    }
    cp_wait<0>();

    const i64 out_row = ((i64)b * H + h) * T;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = row_sum[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const int row = m0 + mt * 64 + warp * 16 + g + r * 8;
            const float inv = l > 0.f ? 1.f / l : 0.f;  // rows that see no key come out as zeros
            u32 pairs[DT];
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) pairs[dt] = pack2<BF16>(acc[mt][dt][2 * r] * inv, acc[mt][dt][2 * r + 1] * inv);
            // (16-byte pieces, row_store.cuh: every lane takes part, rows past T too)
            store_row_16b<DT>(o + b * osb + h * osh + row * ost, pairs, tq, row < T);
            if (row < T && tq == 0) lse[out_row + row] = l > 0.f ? (row_max[mt][r] + log2f(l)) * LN2 : neg_inf<float>();
        }
}

// ---------------------------------------------------------------- backward
// dvec_i = sum_d do_i,d * o_i,d (8 threads per row); then dq (a block per query tile, sweeping key tiles)
// and dk, dv (a block per key tile, sweeping the query tiles of every query head sharing it): each
// recomputes P = exp(scale q.k - lse) and dS = P * (dP - dvec) with dP = do v^T, so no atomics are needed.

// 8 lanes per row, 16-byte loads (rows are 16-byte aligned and d is a multiple of 8). `zero` (zero4
// float4s, or none) is cleared on the way, grid-stride: the fused Hopper backward's dQ accumulator,
// which a separate memset would clear in a launch and a pass of its own.
template <bool BF16>
__device__ __forceinline__ void flash_bwd_dot(const u16* __restrict__ o, const u16* __restrict__ dout,
                                              float* __restrict__ dvec, i64 osb, i64 osh, i64 ost, i64 dsb, i64 dsh,
                                              i64 dst, int H, int T, int D, i64 rows, float4* __restrict__ zero,
                                              i64 zero4) {
    const i64 first = (i64)blockIdx.x * blockDim.x + threadIdx.x, stride = (i64)gridDim.x * blockDim.x;
    float4 nothing;
    nothing.x = nothing.y = nothing.z = nothing.w = 0.f;
    for (i64 i = first; i < zero4; i += stride) zero[i] = nothing;
    const i64 row = first >> 3;
    const int part = threadIdx.x & 7;
    const bool active = row < rows;
    float sum = 0.f;
    if (active) {
        const i64 i = row % T, bh = row / T, b = bh / H, h = bh - b * H;
        const uint4* orow = (const uint4*)(o + b * osb + h * osh + i * ost);
        const uint4* drow = (const uint4*)(dout + b * dsb + h * dsh + i * dst);
        for (int c = part; c < D / 8; c += 8) {
            const uint4 x = orow[c], y = drow[c];
            const u32 xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
            for (int j = 0; j < 4; ++j)
                sum += load16<BF16>((u16)(xs[j] & 0xffffu)) * load16<BF16>((u16)(ys[j] & 0xffffu)) +
                       load16<BF16>((u16)(xs[j] >> 16)) * load16<BF16>((u16)(ys[j] >> 16));
        }
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    sum += __shfl_xor_sync(0xffffffffu, sum, 4);
    if (active && part == 0) dvec[row] = sum;
}

// A block per 64-query tile; key/value tiles double-buffered (the next pair loads while this one is used).
template <bool BF16, int D, bool DROP>
__device__ __forceinline__ void flash_bwd_dq(const u16* __restrict__ q, const u16* __restrict__ k,
                                             const u16* __restrict__ v, const u16* __restrict__ dout,
                                             const float* __restrict__ lse, const float* __restrict__ dvec,
                                             u16* __restrict__ dq, i64 qsb, i64 qsh, i64 qst, i64 ksb, i64 ksh,
                                             i64 kst, i64 vsb, i64 vsh, i64 vst, i64 dsb, i64 dsh, i64 dst,
                                             i64 gsb, i64 gsh, i64 gst, int H, int Hkv, int T, int S, float scale,
                                             int causal, int window, const AttnDropout drop) {
    constexpr int BM = 64, BN = D <= 96 ? 64 : 32, LD = D + FA_PAD, KS = D / 16, NT = BN / 8, DT = D / 8;
    extern __shared__ __align__(16) u16 smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const QueryTile tile(Mask{T, S, S - T, causal, window}, BM, BN, H, Hkv, D);
    const int m0 = tile.m0, b = tile.b, h = tile.h, t_begin = tile.t_begin, t_end = tile.t_end;
    const u16 *kb = tile.kv(k, ksb, ksh), *vb = tile.kv(v, vsb, vsh);

    // The query and output-gradient tiles pass through shared memory (2 * BM rows) into registers.
    load_tile<D, BM>(smem, q + b * qsb + h * qsh, qst, m0, T);
    load_tile<D, BM>(smem + BM * LD, dout + b * dsb + h * dsh, dst, m0, T);
    cp_commit();
    cp_wait<0>();
    __syncthreads();
    u32 qf[KS][4], df[KS][4];
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
        load_a<LD>(qf[kk], smem, warp * 16, kk * 16);
        load_a<LD>(df[kk], smem + BM * LD, warp * 16, kk * 16);
    }
    const i64 bh_row = ((i64)b * H + h) * T;
    const int row0 = m0 + warp * 16 + g;
    float lse2[2], dv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row0 + r * 8;
        lse2[r] = row < T ? lse[bh_row + row] * LOG2E : 0.f;
        dv[r] = row < T ? dvec[bh_row + row] : 0.f;
    }
    __syncthreads();  // the staging area becomes the key/value buffers

    // buffer i: keys at smem + i * 2 * BN * LD, values right after
    auto issue = [&](int t) {
        u16* sk = smem + ((t - t_begin) & 1) * 2 * BN * LD;
        load_tile<D, BN>(sk, kb, kst, t * BN, S);
        load_tile<D, BN>(sk + BN * LD, vb, vst, t * BN, S);
        cp_commit();
    };
    if (t_begin < t_end) issue(t_begin);
    float acc[DT][4];
    zero<DT>(acc);
    const float scale2 = scale * LOG2E;
    for (int t = t_begin; t < t_end; ++t) {
        const int n0 = t * BN;
        if (t + 1 < t_end) issue(t + 1);
        else cp_commit();  // an empty group keeps the count: wait<1> below always means "tile t landed"
        cp_wait<1>();
        __syncthreads();
        const u16* sk = smem + ((t - t_begin) & 1) * 2 * BN * LD;
        const u16* sv = sk + BN * LD;
        float s[NT][4], dp[NT][4];
        zero<NT>(s);
        zero<NT>(dp);
        gemm_rows<BF16, D, BN>(s, qf, sk);
        gemm_rows<BF16, D, BN>(dp, df, sv);
        if (DROP) drop_rows<NT>(dp, drop, bh_row + m0 + warp * 16, (S + 7) / 8, n0 / 8);  // dP of the kept weights
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[nt][e] = fast_exp2(fmaf(s[nt][e], scale2, -lse2[e >> 1]));
        if (!tile.mask.full(m0, m0 + BM, n0, n0 + BN)) zero_masked_rows<NT>(s, tile.mask, row0, n0, tq);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[nt][e] *= dp[nt][e] - dv[e >> 1];  // dS (unscaled)
        gemm_pv<BF16, BN, D>(acc, s, sk);  // dq += dS k
        __syncthreads();  // every warp is done with this buffer before it is loaded again
    }
    cp_wait<0>();
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // (in 16-byte pieces, row_store.cuh: every lane takes part)
        const int row = row0 + r * 8;
        u32 pairs[DT];
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) pairs[dt] = pack2<BF16>(acc[dt][2 * r] * scale, acc[dt][2 * r + 1] * scale);
        store_row_16b<DT>(dq + b * gsb + h * gsh + row * gst, pairs, tq, row < T);
    }
}

// The dk/dv kernel keeps its key and value fragments in registers where they fit (d <= 64).
#define DKDV_KV_IN_REGS(D) ((D) <= 64)

// A block per 64-key tile, sweeping the query tiles of every query head that shares its KV head; the
// query/output-gradient tiles (and their lse/dvec) double-buffered across that whole sweep.
template <bool BF16, int D, bool DROP>
__device__ __forceinline__ void flash_bwd_dkdv(const u16* __restrict__ q, const u16* __restrict__ k,
                                               const u16* __restrict__ v, const u16* __restrict__ dout,
                                               const float* __restrict__ lse, const float* __restrict__ dvec,
                                               u16* __restrict__ dk, u16* __restrict__ dvo, i64 qsb, i64 qsh,
                                               i64 qst, i64 ksb, i64 ksh, i64 kst, i64 vsb, i64 vsh, i64 vst,
                                               i64 dsb, i64 dsh, i64 dst, i64 gsb, i64 gsh, i64 gst, int H, int Hkv,
                                               int T, int S, float scale, int causal, int window,
                                               const AttnDropout drop) {
    constexpr int BN = 64, BM = D <= 64 ? 64 : 32, LD = D + FA_PAD, MT = BM / 8, DT = D / 8, KS = D / 16;
    constexpr bool KV_IN_REGS = DKDV_KV_IN_REGS(D);
    extern __shared__ __align__(16) u16 smem[];
    u16* sk = smem;
    u16* sv = sk + BN * LD;
    u16* sqd = sv + BN * LD;  // two buffers of [query tile | output-gradient tile]
    float* s_stats = (float*)(sqd + 2 * 2 * BM * LD);  // two buffers of [lse | dvec]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
    const KeyTile tile(Mask{T, S, S - T, causal, window}, BN, BM, H, Hkv, D);
    const Mask& mask = tile.mask;
    const int n0 = tile.n0, b = tile.b, hk = tile.hk, total = tile.total;

    load_tile<D, BN>(sk, k + b * ksb + hk * ksh, kst, n0, S);
    load_tile<D, BN>(sv, v + b * vsb + hk * vsh, vst, n0, S);
    cp_commit();
    KeyTile::Step loading = tile.first_step(BM);  // the next step to load (they load in order)
    auto issue = [&](int it) {  // sweep step it (KeyTile) into buffer it & 1
        const int h = loading.h, m0 = loading.m0;
        tile.next(loading, BM);
        u16* bq = sqd + (it & 1) * 2 * BM * LD;
        load_tile<D, BM>(bq, q + b * qsb + h * qsh, qst, m0, T);
        load_tile<D, BM>(bq + BM * LD, dout + b * dsb + h * dsh, dst, m0, T);
        cp_commit();
        load_query_stats(s_stats + (it & 1) * 2 * BM, lse, dvec, b, h, H, T, m0, BM);
    };
    if (total > 0) issue(0);

    float dk_acc[DT][4], dv_acc[DT][4];
    zero<DT>(dk_acc);
    zero<DT>(dv_acc);
    u32 kf[KV_IN_REGS ? KS : 1][4], vf[KV_IN_REGS ? KS : 1][4];
    const float scale2 = scale * LOG2E;
    const int key0 = n0 + warp * 16 + g;  // this thread's keys: key0 and key0 + 8
    KeyTile::Step step = tile.first_step(BM);  // step it's query head and first query
    for (int it = 0; it < total; ++it, tile.next(step, BM)) {
        const int h = step.h, m0 = step.m0;
        if (it + 1 < total) issue(it + 1);
        else cp_commit();
        cp_wait<1>();  // this step's tiles (and, the first time, the key/value tiles) have landed
        __syncthreads();
        if (KV_IN_REGS && it == 0) {
#pragma unroll
            for (int kk = 0; kk < KS; ++kk) {
                load_a<LD>(kf[KV_IN_REGS ? kk : 0], sk, warp * 16, kk * 16);
                load_a<LD>(vf[KV_IN_REGS ? kk : 0], sv, warp * 16, kk * 16);
            }
        }
        const u16* sq = sqd + (it & 1) * 2 * BM * LD;
        const u16* sd = sq + BM * LD;
        const float* s_lse = s_stats + (it & 1) * 2 * BM;
        const float* s_dvec = s_lse + BM;
        // Transposed scores and output-gradient products: rows are this warp's keys, columns queries.
        float st[MT][4], dpt[MT][4];
        zero<MT>(st);
        zero<MT>(dpt);
        if (KV_IN_REGS) {
            gemm_rows<BF16, D, BM>(st, kf, sq);
            gemm_rows<BF16, D, BM>(dpt, vf, sd);
        } else {
            gemm_rows_s<BF16, D, BM>(st, sk, warp * 16, sq);
            gemm_rows_s<BF16, D, BM>(dpt, sv, warp * 16, sd);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                st[mt][e] = fast_exp2(fmaf(st[mt][e], scale2, -s_lse[mt * 8 + 2 * tq + (e & 1)]));
        if (!mask.full(m0, m0 + BM, n0, n0 + BN)) zero_masked_cols<MT>(st, mask, m0, key0, tq);
        if (DROP) {  // dv takes the kept weights, dS the gradient of the kept weights
            const i64 row0 = ((i64)b * H + h) * T + m0, groups = (S + 7) / 8, group0 = (n0 + warp * 16) / 8;
            drop_cols<MT>(dpt, drop, row0, groups, group0);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int e = 0; e < 4; ++e) dpt[mt][e] = st[mt][e] * (dpt[mt][e] - s_dvec[mt * 8 + 2 * tq + (e & 1)]);
            drop_cols<MT>(st, drop, row0, groups, group0);
        } else {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int e = 0; e < 4; ++e) dpt[mt][e] = st[mt][e] * (dpt[mt][e] - s_dvec[mt * 8 + 2 * tq + (e & 1)]);
        }
        gemm_pv<BF16, BM, D>(dv_acc, st, sd);   // dv += P^T do
        gemm_pv<BF16, BM, D>(dk_acc, dpt, sq);  // dk += dS^T q
        __syncthreads();  // every warp is done with this buffer before it is loaded again
    }
    cp_wait<0>();  // (when no query tile was swept, the key/value loads are still to be retired)
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // (in 16-byte pieces, row_store.cuh: every lane takes part)
        const int key = key0 + r * 8;
        const i64 at = b * gsb + hk * gsh + key * gst;  // dk and dv share one layout
        u32 pairs[DT];
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) pairs[dt] = pack2<BF16>(dk_acc[dt][2 * r] * scale, dk_acc[dt][2 * r + 1] * scale);
        store_row_16b<DT>(dk + at, pairs, tq, key < S);
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) pairs[dt] = pack2<BF16>(dv_acc[dt][2 * r], dv_acc[dt][2 * r + 1]);
        store_row_16b<DT>(dvo + at, pairs, tq, key < S);
    }
}

// ---------------------------------------------------------------- extern "C" entry points

// Every entry point takes the dropout arguments (state = the device's int64 [seed, counter], the node's
// stream, the 16-bit threshold and the kept weights' scale); the kernels without "dropout" in their
// name ignore them.
#define FA_DROP_ARGS const i64 *drop_state, u32 drop_stream, u32 drop_threshold, float drop_scale
#define FA_DROP attn_dropout(drop_state, drop_stream, drop_threshold, drop_scale)
#define FA_FWD(NAME, BF, D, DROP, TAG)                                                                         \
    extern "C" __global__ void __launch_bounds__(FA_THREADS) flash_fwd_##TAG##NAME##_d##D(                     \
        const u16* q, const u16* k, const u16* v, u16* o, float* lse, i64 qsb, i64 qsh, i64 qst, i64 ksb,        \
        i64 ksh, i64 kst, i64 vsb, i64 vsh, i64 vst, i64 osb, i64 osh, i64 ost, int H, int Hkv, int T, int S,    \
        float scale, int causal, int window, FA_DROP_ARGS) {                                                    \
        flash_fwd<BF, D, DROP>(q, k, v, o, lse, qsb, qsh, qst, ksb, ksh, kst, vsb, vsh, vst, osb, osh, ost, H,  \
                               Hkv, T, S, scale, causal, window, FA_DROP);                                      \
    }
#define FA_BWD(NAME, BF, D, DROP, TAG)                                                                         \
    extern "C" __global__ void __launch_bounds__(FA_THREADS) flash_bwd_dq_##TAG##NAME##_d##D(                  \
        const u16* q, const u16* k, const u16* v, const u16* dout, const float* lse, const float* dvec, u16* dq, \
        i64 qsb, i64 qsh, i64 qst, i64 ksb, i64 ksh, i64 kst, i64 vsb, i64 vsh, i64 vst, i64 dsb, i64 dsh,      \
        i64 dst, i64 gsb, i64 gsh, i64 gst, int H, int Hkv, int T, int S, float scale, int causal, int window,  \
        FA_DROP_ARGS) {                                                                                         \
        flash_bwd_dq<BF, D, DROP>(q, k, v, dout, lse, dvec, dq, qsb, qsh, qst, ksb, ksh, kst, vsb, vsh, vst,   \
                                  dsb, dsh, dst, gsb, gsh, gst, H, Hkv, T, S, scale, causal, window, FA_DROP);  \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(FA_THREADS) flash_bwd_dkdv_##TAG##NAME##_d##D(                \
        const u16* q, const u16* k, const u16* v, const u16* dout, const float* lse, const float* dvec, u16* dk, \
        u16* dv, i64 qsb, i64 qsh, i64 qst, i64 ksb, i64 ksh, i64 kst, i64 vsb, i64 vsh, i64 vst, i64 dsb,      \
        i64 dsh, i64 dst, i64 gsb, i64 gsh, i64 gst, int H, int Hkv, int T, int S, float scale, int causal,     \
        int window, FA_DROP_ARGS) {                                                                             \
        flash_bwd_dkdv<BF, D, DROP>(q, k, v, dout, lse, dvec, dk, dv, qsb, qsh, qst, ksb, ksh, kst, vsb, vsh,  \
                                    vst, dsb, dsh, dst, gsb, gsh, gst, H, Hkv, T, S, scale, causal, window,     \
                                    FA_DROP);                                                                   \
    }
#define FA_DIMS(NAME, BF, DROP, TAG)                                                                           \
    FA_FWD(NAME, BF, 32, DROP, TAG) FA_FWD(NAME, BF, 48, DROP, TAG) FA_FWD(NAME, BF, 64, DROP, TAG)            \
    FA_FWD(NAME, BF, 96, DROP, TAG) FA_FWD(NAME, BF, 128, DROP, TAG)                                           \
    FA_BWD(NAME, BF, 32, DROP, TAG) FA_BWD(NAME, BF, 48, DROP, TAG) FA_BWD(NAME, BF, 64, DROP, TAG)            \
    FA_BWD(NAME, BF, 96, DROP, TAG) FA_BWD(NAME, BF, 128, DROP, TAG)
#define FA_ALL(NAME, BF) FA_DIMS(NAME, BF, false, ) FA_DIMS(NAME, BF, true, dropout_)

FA_ALL(bf16, true)
FA_ALL(f16, false)

extern "C" __global__ void flash_bwd_dot_bf16(const u16* o, const u16* dout, float* dvec, float4* zero, i64 osb,
                                              i64 osh, i64 ost, i64 dsb, i64 dsh, i64 dst, int H, int T, int D, i64 rows,
                                              i64 zero4) {
    flash_bwd_dot<true>(o, dout, dvec, osb, osh, ost, dsb, dsh, dst, H, T, D, rows, zero, zero4);
}
extern "C" __global__ void flash_bwd_dot_f16(const u16* o, const u16* dout, float* dvec, float4* zero, i64 osb,
                                             i64 osh, i64 ost, i64 dsb, i64 dsh, i64 dst, int H, int T, int D, i64 rows,
                                             i64 zero4) {
    flash_bwd_dot<false>(o, dout, dvec, osb, osh, ost, dsb, dsh, dst, H, T, D, rows, zero, zero4);
}
