// What the flash-attention kernels share (flash_attention.cu: mma.sync, any sm_80+; flash_hopper*.cu:
// wgmma, sm_90a): asynchronous copies into shared memory, rounding to 16-bit pairs, base-2
// exponentials, and which (query, key) pairs a block must visit.
#pragma once
#include "common.cuh"
#include "tile_order.cuh"

#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

// ---------------------------------------------------------------- PTX wrappers

__device__ __forceinline__ u32 smem_u32(const void* p) {
    u32 a;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// 16 bytes from global to shared memory, asynchronously; `bytes` = 0 writes zeros (rows past the end).
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
// 4 bytes likewise (cp.async's smallest copy; through L1).
__device__ __forceinline__ void cp_async4(u32 dst, const void* src, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ void cp_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// Two floats rounded to one register of two 16-bit values, `lo` in the low half (the lower column).
template <bool BF16> __device__ __forceinline__ u32 pack2(float lo, float hi);
template <> __device__ __forceinline__ u32 pack2<true>(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
template <> __device__ __forceinline__ u32 pack2<false>(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// 2^x in one instruction (exp2f adds range handling the softmax does not need); 2^-inf = 0.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Which (query i, key j) pairs are visible: i < T, j < S, and j <= i + off if causal, and
// j > i + off - window if window > 0 (off = S - T: the queries are the last T of the S positions).
// The launcher passes window 0 for a window of S or more, which hides nothing (and would overflow
// the ranges below).
struct Mask {
    int T, S, off, causal, window;
    // Keys [lo, hi) that queries [i0, i1) may see.
    __device__ __forceinline__ int key_lo(int i0) const { return window > 0 ? max(0, i0 + off - window + 1) : 0; }
    __device__ __forceinline__ int key_hi(int i1) const { return causal ? min(S, i1 + off) : S; }
    // Queries [lo, hi) that may see keys [j0, j1).
    __device__ __forceinline__ int query_lo(int j0) const { return causal ? max(0, j0 - off) : 0; }
    __device__ __forceinline__ int query_hi(int j1) const { return window > 0 ? min(T, j1 - 1 - off + window) : T; }
    // Tiles [begin, end) of `bn` keys holding every key that queries [i0, i1) may see.
    __device__ __forceinline__ void key_tiles(int i0, int i1, int bn, int& begin, int& end) const {
        const int hi = key_hi(i1);
        begin = key_lo(i0) / bn;
        end = hi > 0 ? (hi + bn - 1) / bn : 0;
    }
    // The keys [lo, lo + count) query i may see, and the queries [lo, lo + count) that may see key j
    // (count 0: none): the rule above as one range a row, so that a tile's mask costs an unsigned
    // comparison an element (`visible`). (Testing the rule's terms for each element instead, ptxas
    // gave each term a branch and a convergence barrier; written with & rather than &&, it hoisted a
    // tile's tests above the wait for its scores, into registers, and the backward spilled.)
    __device__ __forceinline__ void keys_of(int i, int& lo, int& count) const {
        lo = window > 0 ? i + off - window + 1 : 0;
        count = max(0, (i < T ? (causal ? min(S, i + off + 1) : S) : 0) - lo);
    }
    __device__ __forceinline__ void queries_of(int j, int& lo, int& count) const {
        lo = causal ? j - off : 0;
        count = max(0, (j < S ? (window > 0 ? min(T, j - off + window) : T) : 0) - lo);
    }
    static __device__ __forceinline__ bool visible(int x, int lo, int count) { return (u32)(x - lo) < (u32)count; }
    // True when every pair of the tile is visible (no per-element test needed).
    __device__ __forceinline__ bool full(int i0, int i1, int j0, int j1) const {
        return i1 <= T && j1 <= S && (!causal || j1 - 1 <= i0 + off) && (window <= 0 || j0 > i1 - 1 + off - window);
    }
};

// The probabilities of invisible (query, key) pairs set to 0, for a tile the mask cuts (the caller tests
// Mask::full first, once a tile, so that the common full tile's exponentials run as one straight-line
// block: with the test inside their loop, per element, ptxas gave each element its own branch and
// convergence barrier, about ten instructions an exponential). Accumulator layouts: a warp's 16 rows
// of NT 8-column tiles, this thread's rows row0 and row0 + 8 (mask_rows, zero_masked_rows: queries
// down, keys across from n0), or the transposed tiles of the dk/dv kernels (zero_masked_cols: this
// thread's keys key0 and key0 + 8 down, MT 8-query tiles across from m0).
// `value` (0, or -inf for scores) goes where the pair is invisible. `p`: the tiles as float[4] arrays
// (the mma.sync kernels) or flat, tile t's values at 4 t (the wgmma kernels).
__device__ __forceinline__ float& tile_value(float (*p)[4], int t, int e) { return p[t][e]; }
__device__ __forceinline__ float& tile_value(float* p, int t, int e) { return p[t * 4 + e]; }
template <int NT, class Tiles>
__device__ __forceinline__ void mask_rows(Tiles p, const Mask& mask, int row0, int n0, int tq, float value) {
    int lo[2], count[2];
    mask.keys_of(row0, lo[0], count[0]);
    mask.keys_of(row0 + 8, lo[1], count[1]);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (!Mask::visible(n0 + nt * 8 + 2 * tq + (e & 1), lo[e >> 1], count[e >> 1])) tile_value(p, nt, e) = value;
}
template <int NT, class Tiles>
__device__ __forceinline__ void zero_masked_rows(Tiles p, const Mask& mask, int row0, int n0, int tq) {
    mask_rows<NT>(p, mask, row0, n0, tq, 0.f);
}
template <int MT, class Tiles>
__device__ __forceinline__ void zero_masked_cols(Tiles p, const Mask& mask, int m0, int key0, int tq) {
    int lo[2], count[2];
    mask.queries_of(key0, lo[0], count[0]);
    mask.queries_of(key0 + 8, lo[1], count[1]);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (!Mask::visible(m0 + mt * 8 + 2 * tq + (e & 1), lo[e >> 1], count[e >> 1])) tile_value(p, mt, e) = 0.f;
}

// Which tile a block takes (tile_order.cuh: longest first, by sections of rows), on this GPU.
// %nsmid is an upper bound on the SM ids (it can exceed the SMs present); tile_order uses it only
// for the smallest section size, which an overestimate merely lengthens. Rows of few tiles go row by
// row, and a grid's block then takes (blockIdx.x, blockIdx.y) as they stand, with no %nsmid and no
// sections' arithmetic: computed and then discarded, that cost 2-5% of the kernel at T 512-1024 (on
// an H100) and an 8-byte spill in the default head-dim-128 fused backward.
__device__ __forceinline__ TileOrder tile_order(int index, int tiles, int rows, int row_kb) {
    if (tiles < FLASH_ORDER_MIN_TILES) return tile_order(index, tiles, rows, row_kb, 0);
    unsigned sms;
    asm("mov.u32 %0, %%nsmid;" : "=r"(sms));
    return tile_order(index, tiles, rows, row_kb, (int)sms);
}
__device__ __forceinline__ TileOrder grid_tile_order(int row_kb) {
    if ((int)gridDim.x < FLASH_ORDER_MIN_TILES) return {(int)blockIdx.x, (int)blockIdx.y};
    return tile_order(blockIdx.y * gridDim.x + blockIdx.x, gridDim.x, gridDim.y, row_kb);
}

// The work of a block of the query-tile kernels (forward, dq): BM queries from m0 of head h of batch b,
// which read key/value head hk (D columns), and the tiles [t_begin, t_end) of BN keys holding every key
// they may see. The grid is (query tiles, B H); tile_order picks the block's tile, the last (causal:
// the longest) first.
struct QueryTile {
    Mask mask;
    int m0, b, h, hk, t_begin, t_end;
    __device__ __forceinline__ QueryTile(const Mask& mask_, int BM, int BN, int H, int Hkv, int D) : mask(mask_) {
        set(grid_tile_order(row_kb(D, H, Hkv)), gridDim.x, BM, BN, H, Hkv);
    }
    // The same for work item w (of q_tiles * heads) of a persistent kernel's sweep.
    __device__ __forceinline__ QueryTile(const Mask& mask_, int BM, int BN, int H, int Hkv, int D, int w, int q_tiles,
                                         int heads)
        : mask(mask_) {
        set(tile_order(w, q_tiles, heads, row_kb(D, H, Hkv)), q_tiles, BM, BN, H, Hkv);
    }
    // tile_order's footprint of a row: its keys and values, S D 4 bytes, shared by the H / Hkv query
    // heads next to it
    __device__ __forceinline__ int row_kb(int D, int H, int Hkv) const {
        return (int)(((i64)mask.S * D) >> 8) / (H / Hkv);
    }
    __device__ __forceinline__ void set(TileOrder at, int q_tiles, int BM, int BN, int H, int Hkv) {
        m0 = (q_tiles - 1 - at.rank) * BM;
        b = at.row / H;
        h = at.row - b * H;
        hk = h / (H / Hkv);
        mask.key_tiles(m0, m0 + BM, BN, t_begin, t_end);
    }
    // The rows of key/value head hk of batch b in a (B, Hkv, S, D) tensor with these strides.
    __device__ __forceinline__ const u16* kv(const u16* base, i64 batch_stride, i64 head_stride) const {
        return base + b * batch_stride + hk * head_stride;
    }
};

// The work of a block of the dk/dv kernels: BN keys from n0 of key/value head hk of batch b, and the
// sweep over the query tiles of BM queries, [q_begin, q_begin + tiles), of `heads` of the G query heads
// that read hk, from h0: `total` steps, step `it` being query head h0 + it / tiles, tile
// q_begin + it % tiles. `parts` blocks share a key tile (hopper_bwd_ws: G / parts query heads each,
// G % parts == 0; they then add dk and dv up), so that a block's sweep stays within L2 where G heads'
// would not (flash_attention.py, kv_parts); 1 elsewhere: one block sweeps all G. The grid is (key tiles,
// B Hkv parts), a key/value head's parts in adjacent rows; tile_order picks the block's tile, the first
// (causal: the longest) first.
struct KeyTile {
    Mask mask;
    int n0, b, hk, h0, q_begin, tiles, total;
    __device__ __forceinline__ KeyTile(const Mask& mask_, int BN, int BM, int H, int Hkv, int D, int parts = 1)
        : mask(mask_) {
        const int G = H / Hkv, heads = G / parts;
        // (a row's queries and output gradients, of its query heads)
        const TileOrder at = grid_tile_order((int)(((i64)heads * mask.T * D) >> 8));
        n0 = at.rank * BN;
        const int kv_row = at.row / parts;
        b = kv_row / Hkv;
        hk = kv_row - b * Hkv;
        h0 = hk * G + (at.row - kv_row * parts) * heads;
        q_begin = mask.query_lo(n0) / BM;
        const int query_end = mask.query_hi(n0 + BN);
        const int t_end = query_end > 0 ? (query_end + BM - 1) / BM : 0;
        tiles = t_end > q_begin ? t_end - q_begin : 0;
        total = heads * tiles;
    }
    // Sweep step it's query head and first query (head h0 + it / tiles, tile q_begin + it % tiles) for
    // consecutive steps: a cursor at step 0, moved on one step at a time (dividing by `tiles`, known
    // only at run time, took a score of integer instructions a step, more for the remainder, in loops
    // that are short of issue slots).
    struct Step {
        int h, m0;
    };
    __device__ __forceinline__ Step first_step(int BM) const { return {h0, q_begin * BM}; }
    __device__ __forceinline__ void next(Step& s, int BM) const {
        s.m0 += BM;
        if (s.m0 == (q_begin + tiles) * BM) s.m0 = q_begin * BM, ++s.h;
    }
};

// The BM queries' statistics from m0 of head h into `st` ([lse in base 2 | dvec], 2 BM floats; rows past
// T as zeros), by the block's first BM threads, with plain loads: visible after the next barrier.
__device__ __forceinline__ void load_query_stats(float* st, const float* lse, const float* dvec, int b, int h,
                                                 int H, int T, int m0, int BM) {
    if (threadIdx.x >= BM) return;
    const int row = m0 + threadIdx.x;
    const i64 bh_row = ((i64)b * H + h) * T;
    st[threadIdx.x] = row < T ? lse[bh_row + row] * LOG2E : 0.f;
    st[BM + threadIdx.x] = row < T ? dvec[bh_row + row] : 0.f;
}
// The same statistics copied asynchronously, lse as it is (natural log, not base 2), into the shared
// address st, in the cp.async group the caller commits next: the copying threads do not wait for the
// loads (load_query_stats's stores did, at every step of the wgmma dk/dv kernels).
__device__ __forceinline__ void copy_query_stats(u32 st, const float* lse, const float* dvec, int b, int h, int H,
                                                 int T, int m0, int BM) {
    if (threadIdx.x >= BM) return;
    const int row = m0 + threadIdx.x;
    const i64 at = ((i64)b * H + h) * T + (row < T ? row : 0);
    const int bytes = row < T ? 4 : 0;  // rows past T: zeros
    cp_async4(st + threadIdx.x * 4, lse + at, bytes);
    cp_async4(st + (BM + threadIdx.x) * 4, dvec + at, bytes);
}
