// Flash attention's backward pass on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a): the
// same functions as flash_attention.cu's flash_bwd_dq and flash_bwd_dkdv (same arguments and outputs,
// no dropout), each block's two warpgroups multiplying 64 x N tiles out of shared memory.
//
// Both kernels recompute P = exp(scale q.k - lse) from the forward's log-sum-exp and form
// dS = P * (dP - dvec) with dP = dO V^T (dvec = rowsum(dO * O), flash_bwd_dot), as the mma.sync
// kernels do; without atomics, so dq, dk and dv are the same bits at every run:
// - dq: a block owns 64 WGS queries (WGS = 1 or 2 warpgroups, warpgroup w the rows 64 w..) and sweeps
//   BN-key tiles of K and V,
//   staged two deep: S = Q K^T and dP = dO V^T (both operands in shared memory), then dQ += dS K with
//   dS as the register operand.
// - dk/dv: a block owns 64 WGS keys (warpgroup w the keys 64 w..) and sweeps the BM-query tiles of every
//   query head sharing its key/value head, Q and dO staged two deep: the transposed products
//   S^T = K Q^T and dP^T = V dO^T, so that P^T and dS^T come out in registers in the layout of the
//   register operand of dV += P^T dO and dK += dS^T Q.
// In each, the second product of a pair runs while the exponentials of the first are computed. With one
// warpgroup a block, two or three blocks share an SM and run out of step: one block's exponentials
// overlap another's products, which a block of two warpgroups in lockstep cannot do; two warpgroups
// instead load each query tile once for both (which wins for the fused kernel at head dim 128).
// The fused variant of dk/dv (hopper_bwd_fused*, below) computes dq too, adding its partial sums in
// float32 with atomic reductions: faster (no recomputed S, dP and exponentials), but dq's last bits
// then depend on the order the key blocks run in (flash_attention.py: GRADCRAFT_DETERMINISTIC).
// The tiles' swizzled layout and the wgmma wrappers: wgmma.cuh.
#include "wgmma.cuh"
#include "row_store.cuh"

// Arguments of both kernels, in flash_bwd_dq's and flash_bwd_dkdv's order (without dropout): the inputs,
// then the outputs (dq, or dk and dv, which share one layout: strides gsb, gsh, gst), then the rest.
#define FHB_INPUTS                                                                                      \
    const u16 *__restrict__ q, const u16 *__restrict__ k, const u16 *__restrict__ v,                    \
        const u16 *__restrict__ dout, const float *__restrict__ lse, const float *__restrict__ dvec
#define FHB_SHAPE                                                                                           \
    i64 qsb, i64 qsh, i64 qst, i64 ksb, i64 ksh, i64 kst, i64 vsb, i64 vsh, i64 vst, i64 dsb, i64 dsh, i64 dst, \
        i64 gsb, i64 gsh, i64 gst, int H, int Hkv, int T, int S, float scale, int causal, int window


#if defined(FH_ENABLED)

// A dk/dv kernel's per-query statistic (lse or dvec, staged in shared memory) for this thread's two
// columns 8 mt + 2 tq and the next of the transposed tiles, in one 8-byte load (the pair is 8-byte aligned).
__device__ __forceinline__ float2 query_pair(const float* stat, int mt, int tq) {
    return *reinterpret_cast<const float2*>(stat + mt * 8 + 2 * tq);
}

// rows x cols 16-bit pairs of a float32 accumulator (64 x N per warpgroup) as wgmma's register operand:
// k-step kk holds columns 16 kk.. of the thread's rows.
template <bool BF16, int N>
__device__ __forceinline__ void to_operand(u32 (*a)[4], const float* acc) {
#pragma unroll
    for (int kk = 0; kk < N / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) a[kk][i] = pack2<BF16>(acc[kk * 8 + 2 * i], acc[kk * 8 + 2 * i + 1]);
}

// ---------------------------------------------------------------- dq

template <bool BF16, int D, int BN, int WGS>
__device__ __forceinline__ void hopper_bwd_dq(FHB_INPUTS, u16* __restrict__ dq, FHB_SHAPE) {
    constexpr int BM = 64 * WGS, THREADS = FH_WARPGROUP * WGS, NT = BN / 8, DT = D / 8, TILE = BN * D * 2;
    extern __shared__ __align__(1024) u16 smem[];
    const u32 base = (smem_u32(smem) + 1023u) & ~1023u;  // (the launcher asks for 1 KB more)
    const u32 sq = base, sd = sq + BM * D * 2, sk = sd + BM * D * 2, sv = sk + 2 * TILE;  // stage st: + st * TILE
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2,
              tq = lane & 3;
    const QueryTile tile(Mask{T, S, S - T, causal, window}, BM, BN, H, Hkv, D);
    const int m0 = tile.m0, b = tile.b, h = tile.h, t_begin = tile.t_begin, t_end = tile.t_end;
    const u16 *kb = tile.kv(k, ksb, ksh), *vb = tile.kv(v, vsb, vsh);

    load_swizzled<D, BM, THREADS>(sq, q + b * qsb + h * qsh, qst, m0, T);
    load_swizzled<D, BM, THREADS>(sd, dout + b * dsb + h * dsh, dst, m0, T);
    if (t_begin < t_end) {
        load_kv_tile<D, BN, THREADS>(sk, sv, kb, kst, vb, vst, t_begin * BN, S);
    }
    cp_commit();

    const i64 bh_row = ((i64)b * H + h) * T;
    const int tile_m0 = m0 + wg * 64 + warp * 16, row0 = tile_m0 + g;  // this thread's rows: row0, row0 + 8
    float lse2[2], dv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row0 + r * 8;
        lse2[r] = row < T ? lse[bh_row + row] * LOG2E : 0.f;
        dv[r] = row < T ? dvec[bh_row + row] : 0.f;
    }
    float acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
    const float scale2 = scale * LOG2E;
    const u32 q_rows = sq + wg * 64 * 128, d_rows = sd + wg * 64 * 128;  // this warpgroup's 64 rows

    for (int t = t_begin; t < t_end; ++t) {
        const int st = (t - t_begin) & 1, n0 = t * BN;
        const u32 ck = sk + st * TILE, cv = sv + st * TILE;
        if (t + 1 < t_end) {  // the next tile into the other stage (free since the barrier ending the last tile)
            load_kv_tile<D, BN, THREADS>(sk + (st ^ 1) * TILE, sv + (st ^ 1) * TILE, kb, kst, vb, vst, n0 + BN, S);
        }
        cp_commit();
        cp_wait<1>();  // this tile (and the queries and output gradients) have landed
        fence_proxy_async();
        __syncthreads();

        float s[BN / 2], dp[BN / 2];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) mma_ss<BF16, BN>(s, desc_k<BM>(q_rows, kk), desc_k<BN>(ck, kk), kk);
        wg_commit();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) mma_ss<BF16, BN>(dp, desc_k<BM>(d_rows, kk), desc_k<BN>(cv, kk), kk);
        wg_commit();
        wg_wait<1>();  // S is ready; dP is still being multiplied
        hold<BN / 2>(s);
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) s[i] = fast_exp2(fmaf(s[i], scale2, -lse2[(i >> 1) & 1]));
        if (!tile.mask.full(tile_m0, tile_m0 + 16, n0, n0 + BN)) zero_masked_rows<NT>(s, tile.mask, row0, n0, tq);
        wg_wait<0>();
        hold<BN / 2>(dp);
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) s[i] *= dp[i] - dv[(i >> 1) & 1];  // dS (unscaled)
        u32 a[BN / 16][4];
        to_operand<BF16, BN>(a, s);

        wg_fence();
        hold<D / 2>(acc);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) mma_rs<BF16, D>(acc, a[kk], desc_mn<BN>(ck, kk), 1);  // dQ += dS K
        wg_commit();
        wg_wait<0>();
        hold<D / 2>(acc);
        __syncthreads();  // every warpgroup is done with this stage before the next tile's loads reuse it
    }
    cp_wait<0>();

#pragma unroll
    for (int r = 0; r < 2; ++r) {  // (in 16-byte pieces, row_store.cuh: every lane takes part)
        const int row = row0 + r * 8;
        u32 pairs[DT];
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) pairs[dt] = pack2<BF16>(acc[dt * 4 + 2 * r] * scale, acc[dt * 4 + 2 * r + 1] * scale);
        store_row_16b<DT>(dq + b * gsb + h * gsh + row * gst, pairs, tq, row < T);
    }
}

// ---------------------------------------------------------------- dk, dv

// A block's dK (scale dk_acc) and dV rows, 16-bit, for this thread's keys key0 and key0 + 8 (at, of
// both: the head's first row); keys past S are not written. In 16-byte pieces (row_store.cuh): every
// lane of the warp takes part.
template <bool BF16, int DT>
__device__ __forceinline__ void store_dkdv_rows(u16* dk, u16* dv, i64 at, i64 gst, const float* dk_acc,
                                                const float* dv_acc, float scale, int key0, int S, int tq) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int key = key0 + r * 8;
        u32 pairs[DT];
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) pairs[dt] = pack2<BF16>(dk_acc[dt * 4 + 2 * r] * scale, dk_acc[dt * 4 + 2 * r + 1] * scale);
        store_row_16b<DT>(dk + at + key * gst, pairs, tq, key < S);
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) pairs[dt] = pack2<BF16>(dv_acc[dt * 4 + 2 * r], dv_acc[dt * 4 + 2 * r + 1]);
        store_row_16b<DT>(dv + at + key * gst, pairs, tq, key < S);
    }
}

// dQ's partial sums of one 64-query tile, added into the float32 accumulator dq_acc ((B, H, T rounded up to
// 64, D), zeroed beforehand) in the accumulator's register order, not row-major: chunk c of four floats
// (acc[4 c..4 c + 3]: rows g and g + 8, a column pair) of thread t of the warpgroup at floats
// 4 (128 c + t), so that a warp's vector reductions cover 512 contiguous bytes. hopper_bwd_dq_convert
// reads them back into rows. `chunk0`: the first chunk these 64 columns hold (D = 128 goes in halves).
__device__ __forceinline__ void add_dq_partial(float* tile, const float* acc, int chunk0) {
    const int t = threadIdx.x & (FH_WARPGROUP - 1);
#pragma unroll
    for (int c = 0; c < 8; ++c) {
        float* at = tile + 4 * (FH_WARPGROUP * (chunk0 + c) + t);
        asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(at), "f"(acc[4 * c]), "f"(acc[4 * c + 1]),
                     "f"(acc[4 * c + 2]), "f"(acc[4 * c + 3])
                     : "memory");
    }
}

// FUSED (64-query tiles; one warpgroup, or two at head dim 128, each then one half of dQ): dQ too,
// FlashAttention-2's way: each step's dS^T, rounded to 16 bits, goes to shared memory, and dQ's
// partial sum dS K over this block's keys is multiplied there (A = dS MN-major: the tile's rows are
// keys) and added into dq_acc (add_dq_partial), so no separate dq kernel recomputes S and dP; at head
// dim 128 in two halves of 64 columns (64 more accumulator registers would not fit). OVERLAP: the
// (last) half's product waits for the next step and runs behind its S^T and dP^T while the
// exponentials are computed (issued there rather than left in flight across the loop's back edge,
// where ptxas would serialise every wgmma of the kernel).
// STAGES (2, or 3 for the fused kernel at head dim 64): how deep the query tiles are staged; with 3,
// a step's loads are issued two steps ahead.
template <bool BF16, int D, int BM, int WGS, bool FUSED, bool OVERLAP = false, int STAGES = 2>
__device__ __forceinline__ void hopper_bwd_dkdv(FHB_INPUTS, u16* __restrict__ dk, u16* __restrict__ dvo,
                                                float* __restrict__ dq_acc, FHB_SHAPE) {
    constexpr int BN = 64 * WGS, THREADS = FH_WARPGROUP * WGS, MT = BM / 8, DT = D / 8, TILE = BM * D * 2;
    constexpr bool DEFER = FUSED && OVERLAP;  // dQ's last 64 columns multiplied in the next step
    static_assert(!FUSED || (BM == 64 && (WGS == 1 || (WGS == 2 && D == 128 && !OVERLAP))),
                  "the fused dq takes 64-query tiles, and two warpgroups only at head dim 128 (one half each)");
    static_assert(STAGES == 2 || (STAGES == 3 && FUSED && !OVERLAP && D == 64), "three stages: fused, head dim 64");
    extern __shared__ __align__(1024) u16 smem[];
    const u32 base = (smem_u32(smem) + 1023u) & ~1023u;
    // keys, values, STAGES stages of [queries | output gradients], (FUSED: dS^T, BN keys x BM queries),
    // then STAGES stages of [lse | dvec] (lse in natural log, as the forward wrote it)
    const u32 sk = base, sv = sk + BN * D * 2, sqd = sv + BN * D * 2, sds = sqd + STAGES * 2 * TILE;
    float* s_stats = (float*)((char*)smem + (sds + (FUSED ? BN * BM * 2 : 0) - smem_u32(smem)));
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2,
              tq = lane & 3;
    const KeyTile tile(Mask{T, S, S - T, causal, window}, BN, BM, H, Hkv, D);
    const Mask& mask = tile.mask;
    const int n0 = tile.n0, b = tile.b, hk = tile.hk, total = tile.total;

    load_swizzled<D, BN, THREADS>(sk, k + b * ksb + hk * ksh, kst, n0, S);
    load_swizzled<D, BN, THREADS>(sv, v + b * vsb + hk * vsh, vst, n0, S);
    auto stage_of = [](int it) { return STAGES == 2 ? it & 1 : it % STAGES; };  // (it >= 0)
    KeyTile::Step loading = tile.first_step(BM);  // the next step to load (they load in order)
    auto issue = [&](int it) {  // sweep step it (KeyTile) into stage it % STAGES
        const int h = loading.h, m0 = loading.m0;
        const u32 cq = sqd + stage_of(it) * 2 * TILE;
        load_swizzled<D, BM, THREADS>(cq, q + b * qsb + h * qsh, qst, m0, T);
        load_swizzled<D, BM, THREADS>(cq + TILE, dout + b * dsb + h * dsh, dst, m0, T);
        copy_query_stats(smem_u32(s_stats + stage_of(it) * 2 * BM), lse, dvec, b, h, H, T, m0, BM);
        tile.next(loading, BM);
    };
    if (total > 0) issue(0);
    cp_commit();
    if constexpr (STAGES == 3) {  // step 1 too: each step then issues the one two ahead
        if (total > 1) issue(1);
        cp_commit();
    }

    float dk_acc[D / 2], dv_acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dk_acc[i] = 0.f, dv_acc[i] = 0.f;
    const float scale2 = scale * LOG2E;
    const int key_tile0 = n0 + wg * 64 + warp * 16, key0 = key_tile0 + g;  // this thread's keys: key0, key0 + 8
    const u32 k_rows = sk + wg * 64 * 128, v_rows = sv + wg * 64 * 128;  // this warpgroup's 64 keys
    float dq_part[32];            // FUSED: a step's dQ sums, 64 columns
    float* dq_pending = nullptr;  // DEFER: where in dq_acc the last step's deferred columns go
    KeyTile::Step step = tile.first_step(BM);  // step it's query head and first query
    for (int it = 0; it < total; ++it, tile.next(step, BM)) {
        const int m0 = step.m0;
        const u32 cq = sqd + stage_of(it) * 2 * TILE, cd = cq + TILE;
        // (into the stage step it - 1 read: free since the barrier that ended that step)
        if (it + STAGES - 1 < total) issue(it + STAGES - 1);
        cp_commit();
        cp_wait<STAGES - 1>();  // this step's tiles (and, the first time, the keys and values) have landed
        fence_proxy_async();
        __syncthreads();
        const float* s_lse = s_stats + stage_of(it) * 2 * BM;
        const float* s_dvec = s_lse + BM;

        // Transposed products: rows are this warpgroup's keys, columns the tile's queries.
        float s[BM / 2], dp[BM / 2];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) mma_ss<BF16, BM>(s, desc_k<BN>(k_rows, kk), desc_k<BM>(cq, kk), kk);
        wg_commit();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) mma_ss<BF16, BM>(dp, desc_k<BN>(v_rows, kk), desc_k<BM>(cd, kk), kk);
        wg_commit();
        if constexpr (DEFER) {  // the last step's deferred dQ columns, from its dS^T still in shared memory
            // (at the first step a product of whatever is there, never added: no step is pending)
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk)
                mma_ss_mn<BF16>(dq_part, desc_mn<BM>(sds, kk), desc_mn<BN>(sk + (D / 64 - 1) * BN * 128, kk), kk);
            wg_commit();
            wg_wait<2>();
        } else {
            wg_wait<1>();
        }
        hold<BM / 2>(s);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const float2 l = query_pair(s_lse, mt, tq);  // (one 8-byte load for the two columns)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                s[mt * 4 + e] = fast_exp2(fmaf(s[mt * 4 + e], scale2, -(e & 1 ? l.y : l.x) * LOG2E));
        }
        if (!mask.full(m0, m0 + BM, key_tile0, key_tile0 + 16)) zero_masked_cols<MT>(s, mask, m0, key0, tq);
        if constexpr (DEFER) wg_wait<1>();
        else wg_wait<0>();
        hold<BM / 2>(dp);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const float2 dv = query_pair(s_dvec, mt, tq);
#pragma unroll
            for (int e = 0; e < 4; ++e) dp[mt * 4 + e] = s[mt * 4 + e] * (dp[mt * 4 + e] - (e & 1 ? dv.y : dv.x));
        }
        u32 pt[BM / 16][4], dst_[BM / 16][4];
        to_operand<BF16, BM>(pt, s);
        to_operand<BF16, BM>(dst_, dp);
        if constexpr (DEFER) {  // the deferred product, dS^T's last reader, is done: add its sums
            wg_wait<0>();
            hold<32>(dq_part);
            if (dq_pending) add_dq_partial(dq_pending, dq_part, (D / 64 - 1) * 8);
            // A warp's wait covers its own part of the product, which reads every warp's rows of dS^T:
            // all four must be done before any overwrites its rows.
            __syncthreads();
        }
        if constexpr (FUSED) {
            // dS^T into the swizzled tile: key row key0 - n0 (+ 8), the 16-byte chunk of queries 8 mt..
            // (the previous step's dQ products, its readers, have completed in every warp)
            const u32 row_at = swizzled_row(sds, key0 - n0, tq);
#pragma unroll
            for (int kk = 0; kk < BM / 16; ++kk)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    st_shared_u32(swizzled_chunk(row_at, 2 * kk + (i >> 1)) + (i & 1) * 1024, dst_[kk][i]);
            fence_proxy_async();
            __syncthreads();
        }

        wg_fence();
        hold<D / 2>(dv_acc);
        hold<D / 2>(dk_acc);
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) mma_rs<BF16, D>(dv_acc, pt[kk], desc_mn<BM>(cd, kk), 1);  // dV += P^T dO
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) mma_rs<BF16, D>(dk_acc, dst_[kk], desc_mn<BM>(cq, kk), 1);  // dK += dS^T Q
        if constexpr (FUSED) {
            // dQ (64 queries x D) += dS K over this block's keys, 64 columns at a time; with two
            // warpgroups (head dim 128) each multiplies one half over all 128 keys of dS^T
            const int Tp = (T + 63) & ~63;
            float* dq_tile = dq_acc + (((i64)b * H + step.h) * Tp + m0) * D;
            constexpr int INLINE = (D / 64 - (DEFER ? 1 : 0)) / WGS;  // halves this warpgroup multiplies now
#pragma unroll
            for (int j = 0; j < INLINE; ++j) {
                const int half = WGS == 1 ? j : j * WGS + wg;
#pragma unroll
                for (int kk = 0; kk < BN / 16; ++kk)
                    mma_ss_mn<BF16>(dq_part, desc_mn<BM>(sds, kk), desc_mn<BN>(sk + half * BN * 128, kk), kk);
                wg_commit();
                wg_wait<0>();
                hold<32>(dq_part);
                add_dq_partial(dq_tile, dq_part, half * 8);
                if (j + 1 < INLINE) wg_fence();
            }
            if constexpr (INLINE == 0) {
                wg_commit();
                wg_wait<0>();
            }
            if constexpr (DEFER) dq_pending = dq_tile;
        } else {
            wg_commit();
            wg_wait<0>();
        }
        hold<D / 2>(dv_acc);
        hold<D / 2>(dk_acc);
        __syncthreads();  // every warpgroup is done with this stage before it is loaded again
    }
    cp_wait<0>();  // (when no query tile was swept, the key/value loads are still to be retired)
    if (DEFER && dq_pending) {  // the last step's deferred columns
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
            mma_ss_mn<BF16>(dq_part, desc_mn<BM>(sds, kk), desc_mn<BN>(sk + (D / 64 - 1) * BN * 128, kk), kk);
        wg_commit();
        wg_wait<0>();
        hold<32>(dq_part);
        add_dq_partial(dq_pending, dq_part, (D / 64 - 1) * 8);
    }

    store_dkdv_rows<BF16, DT>(dk, dvo, b * gsb + hk * gsh, gst, dk_acc, dv_acc, scale, key0, S, tq);
}
// dq = scale * dq_acc, read back from add_dq_partial's order: a block per 64-query tile of one head (and
// dk = scale * its sums, dv = its sums, the same way, where hopper_bwd_ws's blocks add them up: H, T
// are then Hkv, S). The
// tile is rounded into shared memory first (rows padded by 16 bytes: the quads' stores land in distinct
// banks), then written out by rows in 16-byte pieces; a thread's own values are two 4-byte pieces of
// two rows, whose stores a warp would spread over eight rows' sectors.
template <bool BF16, int D>
__device__ __forceinline__ void hopper_bwd_dq_convert(const float* __restrict__ dq_acc, u16* __restrict__ dq, i64 gsb,
                                                      i64 gsh, i64 gst, int H, int T, float scale) {
    constexpr int ROW = D / 2 + 4;  // u32 (two 16-bit values) per padded shared row
    __shared__ __align__(16) u32 rows_s[64 * ROW];
    const int t = threadIdx.x, warp = t >> 5, lane = t & 31, m0 = blockIdx.x * 64, bh = blockIdx.y;
    const int b = bh / H, h = bh - b * H, r = warp * 16 + (lane >> 2), pair = lane & 3;
    const float4* tile = (const float4*)(dq_acc + ((i64)bh * ((T + 63) & ~63) + m0) * D);
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
        const float4 x = tile[FH_WARPGROUP * c + t];
        rows_s[r * ROW + c * 4 + pair] = pack2<BF16>(x.x * scale, x.y * scale);
        rows_s[(r + 8) * ROW + c * 4 + pair] = pack2<BF16>(x.z * scale, x.w * scale);
    }
    __syncthreads();
    u16* out = dq + b * gsb + h * gsh;
    const bool vector = ((reinterpret_cast<u64>(out) | (u64)gst * 2) & 15) == 0;
    constexpr int CHUNKS = D / 8;  // 16-byte pieces a row
#pragma unroll
    for (int j = 0; j < 64 * CHUNKS / FH_WARPGROUP; ++j) {
        const int i = j * FH_WARPGROUP + t, row = i / CHUNKS, chunk = i % CHUNKS;
        if (m0 + row >= T) continue;
        const u32* from = rows_s + row * ROW + chunk * 4;
        u16* to = out + (i64)(m0 + row) * gst + chunk * 8;
        if (vector) {
            *(uint4*)to = *(const uint4*)from;
        } else {
#pragma unroll
            for (int w = 0; w < 4; ++w) ((u32*)to)[w] = from[w];
        }
    }
}

// ---------------------------------------------------------------- dk, dv and dQ, warp-specialised

// The fused backward on FlashAttention-3's tiling: 128 keys a block, two consumer warpgroups of 64
// keys each, and a producer warpgroup that only copies. A sweep step takes BM queries (64 at head dim
// 128, 128 at head dim 64). Per step, each consumer forms S^T, dP^T, P^T and dS^T for its keys as
// hopper_bwd_dkdv does and writes its dS^T rows into the step's shared buffer (two buffers, used in
// turn); the consumers meet at one named barrier (the tile is whole), then each multiplies its share
// of dQ = dS K over all 128 keys (head dim 128: one 64-column half each; head dim 64: one 64-query
// half each) beside dV += P^T dO and dK += dS^T Q. dQ's partial sums go to shared memory, in
// add_dq_partial's order, and the producer's first thread adds the whole BM x D tile into dq_acc with
// one bulk reduction (cp.reduce.async.bulk): the consumers issue no atomics and the adding costs no
// thread's loads. The producer stages the keys and values once, then each step's query and output-
// gradient tiles with their lse and dvec into one of STAGES stages, under "full" and "empty" mbarriers
// (the forward's _ws kernels' protocol); the dQ tile has "full" (every consumer thread has written)
// and "empty" (the bulk reduction has read it) barriers of its own.
// GQA: with `parts` > 1, a key tile's sweep over its G query heads is shared by `parts` blocks (KeyTile),
// which add their dK and dV sums in float32 into dkv_acc (dk's (B, Hkv, S rounded up to 64, D), then
// dv's, zeroed beforehand; add_dq_partial's order) for hopper_bwd_dq_convert to write out: the launcher
// splits sweeps of many heads, whose data outgrew L2 (flash_attention.py, kv_parts). The order of those
// additions varies, as dQ's does.
// Why the buffers suffice: a consumer writes dS^T buffer it & 1 at step it after the named barrier of
// step it - 1, which each warpgroup reaches only after its step-(it - 2) dQ product (the buffer's
// last reader) has retired.
// Dynamic shared memory: 128 D 2 2 (keys, values) + STAGES (2 BM D 2 + 2 BM 4) (query and output-
// gradient tiles; lse and dvec) + 2 128 BM 2 (dS^T) + BM D 4 (dQ) + 1024 bytes; 384 threads.
template <bool BF16, int D, int STAGES, int PRODUCER_REGS, int CONSUMER_REGS>
__device__ __forceinline__ void hopper_bwd_ws(FHB_INPUTS, u16* __restrict__ dk, u16* __restrict__ dvo,
                                              float* __restrict__ dq_acc, float* __restrict__ dkv_acc, FHB_SHAPE,
                                              int parts) {
    constexpr int BN = 128, BM = D == 128 ? 64 : 128, MT = BM / 8, DT = D / 8;
    constexpr int TILE = BM * D * 2, DS = BN * BM * 2, DQ = BM * D * 4;  // bytes
    constexpr int ENTRY_REGS = (65536 / (FH_WARPGROUP * 3)) & ~7;      // (hopper_fwd_ws explains)
    static_assert(D == 64 || D == 128, "head dims 64 and 128");
    static_assert(PRODUCER_REGS + 2 * CONSUMER_REGS <= 3 * ENTRY_REGS, "registers the block does not hold");
    extern __shared__ __align__(1024) u16 smem[];
    __shared__ __align__(8) u64 bars[3 + 2 * STAGES];  // keys' and values' full, dQ's full and empty, then by stage
    const u32 base = (smem_u32(smem) + 1023u) & ~1023u;
    const u32 sk = base, sv = sk + BN * D * 2, sqd = sv + BN * D * 2, sds = sqd + STAGES * 2 * TILE,
              sdq = sds + 2 * DS;
    float* s_stats = (float*)((char*)smem + (sdq + DQ - smem_u32(smem)));  // [lse | dvec] by stage
    const u32 kv_full = smem_u32(bars), dq_full = kv_full + 8, dq_empty = kv_full + 16, full0 = kv_full + 24,
              empty0 = full0 + 8 * STAGES;  // stage st: + 8 st
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2,
              tq = lane & 3;
    const KeyTile tile(Mask{T, S, S - T, causal, window}, BN, BM, H, Hkv, D, parts);
    const Mask& mask = tile.mask;
    const int n0 = tile.n0, b = tile.b, hk = tile.hk, total = tile.total;
    const int Tp = (T + 63) & ~63;  // dq_acc's rows a head
    if (threadIdx.x == 0) {
        mbar_init(kv_full, FH_WARPGROUP);
        mbar_init(dq_full, 2 * FH_WARPGROUP);  // every consumer thread, once its sums are written
        mbar_init(dq_empty, 1);                // the producer's first thread, once the reduction has read them
        for (int st = 0; st < STAGES; ++st) {
            mbar_init(full0 + 8 * st, FH_WARPGROUP);
            mbar_init(empty0 + 8 * st, 8);  // one lane of each consumer warp
        }
    }
    __syncthreads();

    if (wg == 0) {  // ---- the producer
        regs_dec<PRODUCER_REGS>();
        load_swizzled<D, BN, FH_WARPGROUP>(sk, k + b * ksb + hk * ksh, kst, n0, S);
        load_swizzled<D, BN, FH_WARPGROUP>(sv, v + b * vsb + hk * vsh, vst, n0, S);
        mbar_arrive_copies(kv_full);
        KeyTile::Step adding = tile.first_step(BM), loading = adding;  // (each goes through the steps in order)
        auto add_dq = [&](int j) {  // (thread 0) step j's dQ sums from shared memory into dq_acc
            const int h = adding.h, m0 = adding.m0;
            tile.next(adding, BM);
            mbar_wait(dq_full, j & 1);
            // (BM = 128: the second 64-query tile is past dq_acc's rows when T ends in the first)
            const int rows = min(BM, Tp - m0);
            bulk_reduce_add_f32(dq_acc + (((i64)b * H + h) * Tp + m0) * D, sdq, rows * D * 4);
            bulk_commit();
            bulk_wait_read<0>();
            mbar_arrive(dq_empty);
        };
        for (int it = 0; it < total; ++it) {
            const int st = it % STAGES;
            if (it >= STAGES) mbar_wait(empty0 + 8 * st, ((it / STAGES) - 1) & 1);  // step it - STAGES is done
            const int h = loading.h, m0 = loading.m0;
            tile.next(loading, BM);
            const u32 cq = sqd + st * 2 * TILE;
            load_swizzled<D, BM, FH_WARPGROUP>(cq, q + b * qsb + h * qsh, qst, m0, T);
            load_swizzled<D, BM, FH_WARPGROUP>(cq + TILE, dout + b * dsb + h * dsh, dst, m0, T);
            copy_query_stats(smem_u32(s_stats + st * 2 * BM), lse, dvec, b, h, H, T, m0, BM);
            mbar_arrive_copies(full0 + 8 * st);
            // that step's dQ tile follows its release of the stage closely
            if (threadIdx.x == 0 && it >= STAGES) add_dq(it - STAGES);
        }
        if (threadIdx.x == 0) {
            for (int j = max(0, total - STAGES); j < total; ++j) add_dq(j);
            bulk_wait<0>();
        }
        cp_wait_all();
        return;
    }

    // ---- a consumer: warpgroup c = wg - 1 owns the keys n0 + 64 c..
    regs_inc<CONSUMER_REGS>();
    const int c = wg - 1, t = threadIdx.x & (FH_WARPGROUP - 1);
    float dk_acc[D / 2], dv_acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) dk_acc[i] = 0.f, dv_acc[i] = 0.f;
    const float scale2 = scale * LOG2E;
    const int key_tile0 = n0 + c * 64 + warp * 16, key0 = key_tile0 + g;  // this thread's keys: key0, key0 + 8
    const u32 k_rows = sk + c * 64 * 128, v_rows = sv + c * 64 * 128;      // this warpgroup's 64 keys
    // This warpgroup's share of dQ = dS K: at head dim 128 the columns 64 c.. (K's column block c) of
    // all BM = 64 queries, at 64 the queries 64 c.. (dS^T's column block c); its place in the dQ tile.
    const u32 dq_a = D == 128 ? 0u : c * BN * 128, dq_b = sk + (D == 128 ? c * BN * 128 : 0u);
    float* dq_s = (float*)((char*)smem + (sdq - smem_u32(smem))) + (D == 128 ? 4 * FH_WARPGROUP * 8 * c : 64 * D * c);
    float dq_part[32];
    mbar_wait(kv_full, 0);
    fence_proxy_async();
    KeyTile::Step step = tile.first_step(BM);  // step it's query head and first query
#pragma unroll 1
    for (int it = 0; it < total; ++it, tile.next(step, BM)) {
        const int st = it % STAGES, m0 = step.m0;
        const u32 cq = sqd + st * 2 * TILE, cd = cq + TILE, ds = sds + (it & 1) * DS;
        mbar_wait(full0 + 8 * st, (it / STAGES) & 1);
        fence_proxy_async();  // (copies by the generic proxy, read next by wgmma)
        const float* s_lse = s_stats + st * 2 * BM;
        const float* s_dvec = s_lse + BM;

        // Transposed products: rows are this warpgroup's keys, columns the step's queries.
        float s[BM / 2], dp[BM / 2];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) mma_ss<BF16, BM>(s, desc_k<BN>(k_rows, kk), desc_k<BM>(cq, kk), kk);
        wg_commit();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) mma_ss<BF16, BM>(dp, desc_k<BN>(v_rows, kk), desc_k<BM>(cd, kk), kk);
        wg_commit();
        wg_wait<1>();
        hold<BM / 2>(s);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const float2 l = query_pair(s_lse, mt, tq);  // (one 8-byte load for the two columns)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                s[mt * 4 + e] = fast_exp2(fmaf(s[mt * 4 + e], scale2, -(e & 1 ? l.y : l.x) * LOG2E));
        }
        if (!mask.full(m0, m0 + BM, key_tile0, key_tile0 + 16)) zero_masked_cols<MT>(s, mask, m0, key0, tq);
        wg_wait<0>();
        hold<BM / 2>(dp);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const float2 dv = query_pair(s_dvec, mt, tq);
#pragma unroll
            for (int e = 0; e < 4; ++e) dp[mt * 4 + e] = s[mt * 4 + e] * (dp[mt * 4 + e] - (e & 1 ? dv.y : dv.x));
        }
        u32 pt[BM / 16][4], dst_[BM / 16][4];
        to_operand<BF16, BM>(pt, s);
        to_operand<BF16, BM>(dst_, dp);
        // dS^T into the step's buffer: key row key0 - n0 (+ 8), the 16-byte chunk of queries 8 mt..
        // (column block mt / 8 of the swizzled tile)
        const u32 row_at = swizzled_row(ds, key0 - n0, tq);
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int mt = 2 * kk + (i >> 1);
                st_shared_u32(swizzled_chunk(row_at, mt & 7) + (mt >> 3) * (BN * 128) + (i & 1) * 1024,
                              dst_[kk][i]);
            }
        fence_proxy_async();
        named_sync(1, 2 * FH_WARPGROUP);  // both warpgroups' rows of dS^T are in

        // dQ's share first, in a group of its own, so that its sums are written out while dV and dK
        // still multiply
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) mma_ss_mn<BF16>(dq_part, desc_mn<BN>(ds + dq_a, kk), desc_mn<BN>(dq_b, kk), kk);
        wg_commit();
        hold<D / 2>(dv_acc);
        hold<D / 2>(dk_acc);
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) mma_rs<BF16, D>(dv_acc, pt[kk], desc_mn<BM>(cd, kk), 1);  // dV += P^T dO
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk) mma_rs<BF16, D>(dk_acc, dst_[kk], desc_mn<BM>(cq, kk), 1);  // dK += dS^T Q
        wg_commit();
        wg_wait<1>();
        hold<32>(dq_part);
        if (it > 0) mbar_wait(dq_empty, (it - 1) & 1);  // the last step's tile has been read out
#pragma unroll
        for (int j = 0; j < 8; ++j)
            *(float4*)(dq_s + 4 * (FH_WARPGROUP * j + t)) =
                make_float4(dq_part[4 * j], dq_part[4 * j + 1], dq_part[4 * j + 2], dq_part[4 * j + 3]);
        fence_proxy_async();  // (read next by the bulk reduction, the async proxy)
        mbar_arrive(dq_full);
        wg_wait<0>();
        hold<D / 2>(dv_acc);
        hold<D / 2>(dk_acc);
        __syncwarp();
        if (lane == 0) mbar_arrive(empty0 + 8 * st);  // this warp's products reading the stage have retired
    }

    if (parts == 1) {
        store_dkdv_rows<BF16, DT>(dk, dvo, b * gsb + hk * gsh, gst, dk_acc, dv_acc, scale, key0, S, tq);
    } else if (n0 + c * 64 < S) {
        // this warpgroup's 64 keys' sums, added into dk's and dv's (hopper_bwd_dq_convert writes them out)
        const int Sp = (S + 63) & ~63;
        float* dk_tile = dkv_acc + (((i64)b * Hkv + hk) * Sp + n0 + c * 64) * D;
        float* dv_tile = dk_tile + (i64)(gridDim.y / parts) * Sp * D;  // (dv's sums follow dk's B Hkv heads)
#pragma unroll
        for (int half = 0; half < D / 64; ++half) {
            add_dq_partial(dk_tile, dk_acc + 32 * half, 8 * half);
            add_dq_partial(dv_tile, dv_acc + 32 * half, 8 * half);
        }
    }
}

#define FHB_SHAPE_ARGS \
    qsb, qsh, qst, ksb, ksh, kst, vsb, vsh, vst, dsb, dsh, dst, gsb, gsh, gst, H, Hkv, T, S, scale, causal, window
#define FHB_DQ_BODY(BF, D, BN, WGS) hopper_bwd_dq<BF, D, BN, WGS>(q, k, v, dout, lse, dvec, dq, FHB_SHAPE_ARGS);
#define FHB_DKDV_BODY(BF, D, BM, WGS) \
    hopper_bwd_dkdv<BF, D, BM, WGS, false>(q, k, v, dout, lse, dvec, dk, dv, nullptr, FHB_SHAPE_ARGS);
#define FHB_CONVERT_BODY(BF, D) hopper_bwd_dq_convert<BF, D>(dq_acc, dq, gsb, gsh, gst, H, T, scale);
#define FHB_WS_BODY(BF, D)                                                                                   \
    hopper_bwd_ws<BF, D, FHB_WS_STAGES, FHB_WS_PRODUCER_REGS, FHB_WS_CONSUMER_REGS>(q, k, v, dout, lse, dvec, dk, \
                                                                                   dv, dq_acc, dkv_acc,           \
                                                                                   FHB_SHAPE_ARGS, parts);
#else
#define FHB_WS_BODY(BF, D)
#define FHB_DQ_BODY(BF, D, BN, WGS)
#define FHB_DKDV_BODY(BF, D, BM, WGS)
#define FHB_CONVERT_BODY(BF, D)
#endif  // FH_ENABLED

// ---------------------------------------------------------------- extern "C" entry points
// hopper_bwd_dq_{bf16,f16}_d{D}_n{BN}_w{WGS} (BN keys per tile) and hopper_bwd_dkdv_{bf16,f16}_d{D}_m{BM}_w{WGS}
// (BM queries per tile), WGS warpgroups a block: flash_bwd_dq's and flash_bwd_dkdv's arguments without dropout.
#define FHB_DQ(NAME, BF, D, BN, WGS)                                                                                \
    extern "C" __global__ void __launch_bounds__(FH_WARPGROUP * WGS, 1) hopper_bwd_dq_##NAME##_d##D##_n##BN##_w##WGS( \
        FHB_INPUTS, u16* dq, FHB_SHAPE) {                                                                           \
        FHB_DQ_BODY(BF, D, BN, WGS)                                                                                 \
    }
#define FHB_DKDV(NAME, BF, D, BM, WGS)                                                                                \
    extern "C" __global__ void __launch_bounds__(FH_WARPGROUP * WGS, 1) hopper_bwd_dkdv_##NAME##_d##D##_m##BM##_w##WGS( \
        FHB_INPUTS, u16* dk, u16* dv, FHB_SHAPE) {                                                                    \
        FHB_DKDV_BODY(BF, D, BM, WGS)                                                                                 \
    }
// hopper_bwd_dq_convert_{bf16,f16}_d{D} (a block of 128 threads per 64 queries of a head) writes dq from the
// fused kernels' float32 sums (dq_acc).
#define FHB_CONVERT(NAME, BF, D)                                                                               \
    extern "C" __global__ void __launch_bounds__(FH_WARPGROUP) hopper_bwd_dq_convert_##NAME##_d##D(              \
        const float* dq_acc, u16* dq, i64 gsb, i64 gsh, i64 gst, int H, int T, float scale) {                 \
        FHB_CONVERT_BODY(BF, D)                                                                                \
    }
// hopper_bwd_fused_{bf16,f16}_d{D}_m{BM}_c2_ws: the warp-specialised fused kernel (hopper_bwd_ws), the
// fused kernels' arguments with dkv_acc after dq_acc and `parts` last (1: dk and dv written directly);
// 384 threads, 128 keys a block, BM = 64 (head dim 128) or 128 (64) queries a step, staged
// FHB_WS_STAGES deep; registers moved from the producer (40) to the consumers (232; at
// 24/240 the producer spilled 128 bytes, here 8).
#define FHB_WS_STAGES 2
#define FHB_WS_PRODUCER_REGS 40
#define FHB_WS_CONSUMER_REGS 232
#define FHB_FUSED_WS(NAME, BF, D, BM)                                                                             \
    extern "C" __global__ void __launch_bounds__(3 * FH_WARPGROUP, 1)                                           \
        hopper_bwd_fused_##NAME##_d##D##_m##BM##_c2_ws(FHB_INPUTS, u16* dk, u16* dv, float* dq_acc,             \
                                                       float* dkv_acc, FHB_SHAPE, int parts) {                  \
        FHB_WS_BODY(BF, D)                                                                                       \
    }
// Here the kernels flash_attention.py runs (flash_variants.HOPPER_TILES, and DETERMINISTIC_TILES' separate dq
// and dk/dv); dev/cuda/flash_hopper_bwd_lab.cu holds the other variants.
#define FHB_ALL(NAME, BF)                                                                                        \
    FHB_DQ(NAME, BF, 64, 64, 1) FHB_DQ(NAME, BF, 128, 64, 1) FHB_DKDV(NAME, BF, 64, 64, 1)                       \
        FHB_DKDV(NAME, BF, 128, 64, 1) FHB_CONVERT(NAME, BF, 64) FHB_CONVERT(NAME, BF, 128)                      \
            FHB_FUSED_WS(NAME, BF, 64, 128) FHB_FUSED_WS(NAME, BF, 128, 64)
FHB_ALL(bf16, true)
FHB_ALL(f16, false)
