// Flash attention's forward pass on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a): the
// same function as flash_attention.cu's flash_fwd (same arguments, outputs and masks; no dropout),
// with each block's two warpgroups multiplying 64 x N tiles straight out of shared memory instead of
// each warp feeding 16 x 8 products through ldmatrix (FlashAttention-3, Shah et al. 2024).
//
// A block owns 64 WGS queries (WGS = 1 or 2 warpgroups, warpgroup w the rows 64 w..) of one head and
// sweeps the key/value tiles
// of BN keys they may see, staged two deep by cp.async: while a tile is used, the next one loads.
// Per tile: S = Q K^T (wgmma, both operands in shared memory), the mask and the online softmax on the
// accumulator registers, then O += P V with P (rounded to 16 bits) as wgmma's register operand; the
// accumulator's layout (a warp's 16 rows, lane l holding rows l / 4 and l / 4 + 8, columns
// 8 j + 2 (l % 4) and the next) is exactly the register operand's layout, so P never leaves registers.
// The tiles' swizzled layout and the wgmma wrappers: wgmma.cuh.
//
#include "wgmma.cuh"
#include "row_store.cuh"

#if defined(FH_ENABLED)

// ---------------------------------------------------------------- forward

// The mask and the online softmax (base 2, on unscaled scores) of the score tile s of BN keys from n0, in
// place (s becomes P in float32), updating the rows' running max and sum. O's rescale factors come back
// in alpha rather than being applied: O may be an in-flight wgmma's accumulator.
template <int BN>
__device__ __forceinline__ void softmax_tile(float* s, float* row_max, float* row_sum, float* alpha, const Mask& mask,
                                             int tile_m0, int row0, int tq, int n0, float scale2) {
    constexpr int NT = BN / 8;
    if (!mask.full(tile_m0, tile_m0 + 16, n0, n0 + BN)) mask_rows<NT>(s, mask, row0, n0, tq, neg_inf<float>());
    // The row max and sum in four independent chains each (a single chain of dependent fmax / add
    // instructions made the warps wait on each one's latency: Nsight Compute's "wait" stalls).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float m4[4] = {neg_inf<float>(), neg_inf<float>(), neg_inf<float>(), neg_inf<float>()};
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) m4[nt & 3] = fmaxf(m4[nt & 3], fmaxf(s[nt * 4 + 2 * r], s[nt * 4 + 2 * r + 1]));
        float mx = fmaxf(fmaxf(m4[0], m4[1]), fmaxf(m4[2], m4[3]));
        mx = fmaxf(mx * scale2, row_max[r]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float shift = mx == neg_inf<float>() ? 0.f : mx;  // a row with nothing visible yet
        alpha[r] = fast_exp2(row_max[r] - shift);
        row_max[r] = mx;
        float l4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const float p0 = fast_exp2(fmaf(s[nt * 4 + 2 * r], scale2, -shift));
            const float p1 = fast_exp2(fmaf(s[nt * 4 + 2 * r + 1], scale2, -shift));
            s[nt * 4 + 2 * r] = p0, s[nt * 4 + 2 * r + 1] = p1;
            l4[nt & 3] += p0 + p1;
        }
        row_sum[r] = fmaf(row_sum[r], alpha[r], (l4[0] + l4[1]) + (l4[2] + l4[3]));
    }
}

// P (float32, the accumulator's layout) rounded to 16-bit pairs: the register operand of O += P V.
template <bool BF16, int BN> __device__ __forceinline__ void pack_p(const float* s, u32 (*p)[4]) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) p[kk][i] = pack2<BF16>(s[kk * 8 + 2 * i], s[kk * 8 + 2 * i + 1]);
}

// O (this thread's accumulators) *= alpha, row by row.
template <int D> __device__ __forceinline__ void rescale_o(float* acc, const float* alpha) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) acc[dt * 4 + 2 * r] *= alpha[r], acc[dt * 4 + 2 * r + 1] *= alpha[r];
}

// S (64 x BN: this warpgroup's queries, q_rows, by the key tile at k) = Q K^T, issued, not committed.
template <bool BF16, int D, int BN, int BM> __device__ __forceinline__ void issue_scores(float* s, u32 q_rows, u32 k) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) mma_ss<BF16, BN>(s, desc_k<BM>(q_rows, kk), desc_k<BN>(k, kk), kk);
}
// O += P V (the value tile at v), issued, not committed.
template <bool BF16, int D, int BN> __device__ __forceinline__ void issue_pv(float* acc, const u32 (*p)[4], u32 v) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) mma_rs<BF16, D>(acc, p[kk], desc_mn<BN>(v, kk), 1);
}
// S = Q K^T, waited for.
template <bool BF16, int D, int BN, int BM> __device__ __forceinline__ void scores(float* s, u32 q_rows, u32 k) {
    wg_fence();
    issue_scores<BF16, D, BN, BM>(s, q_rows, k);
    wg_commit();
    wg_wait<0>();
    hold<BN / 2>(s);
}
// O = alpha O + P V with P the softmax's tile s (float32), rounded into p, waited for.
template <bool BF16, int D, int BN>
__device__ __forceinline__ void add_pv(float* acc, const float* s, const float* alpha, u32 (*p)[4], u32 v) {
    rescale_o<D>(acc, alpha);
    pack_p<BF16, BN>(s, p);
    wg_fence();
    hold<D / 2>(acc);
    issue_pv<BF16, D, BN>(acc, p, v);
    wg_commit();
    wg_wait<0>();
    hold<D / 2>(acc);
}

// The block's output rows: O / l (16-bit) and lse = (max + log2 l) ln 2 for this thread's rows row0 and
// row0 + 8 of one head (o, lse: its first row); rows that see no key come out as zeros and -inf. O goes
// out in 16-byte pieces (row_store.cuh); every lane of the warp takes part, rows past T included.
template <bool BF16, int D>
__device__ __forceinline__ void store_rows(u16* o, i64 ost, float* lse, const float* acc, const float* row_sum,
                                           const float* row_max, int row0, int T, int tq) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = row_sum[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = row0 + r * 8;
        const float inv = l > 0.f ? 1.f / l : 0.f;
        u32 pairs[D / 8];
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt) pairs[dt] = pack2<BF16>(acc[dt * 4 + 2 * r] * inv, acc[dt * 4 + 2 * r + 1] * inv);
        store_row_16b<D / 8>(o + row * ost, pairs, tq, row < T);
        if (row < T && tq == 0) lse[row] = l > 0.f ? (row_max[r] + log2f(l)) * LN2 : neg_inf<float>();
    }
}


template <bool BF16, int D, int BN, int WGS>
__device__ __forceinline__ void hopper_fwd(const u16* __restrict__ q, const u16* __restrict__ k,
                                           const u16* __restrict__ v, u16* __restrict__ o, float* __restrict__ lse,
                                           i64 qsb, i64 qsh, i64 qst, i64 ksb, i64 ksh, i64 kst, i64 vsb, i64 vsh,
                                           i64 vst, i64 osb, i64 osh, i64 ost, int H, int Hkv, int T, int S,
                                           float scale, int causal, int window) {
    constexpr int BM = 64 * WGS, THREADS = FH_WARPGROUP * WGS, TILE = BN * D * 2;
    extern __shared__ __align__(1024) u16 smem[];
    const u32 base = (smem_u32(smem) + 1023u) & ~1023u;  // (the launcher asks for 1 KB more)
    const u32 sq = base, sk = sq + BM * D * 2, sv = sk + 2 * TILE;  // stage st: sk + st * TILE, sv + st * TILE
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2,
              tq = lane & 3;
    const QueryTile tile(Mask{T, S, S - T, causal, window}, BM, BN, H, Hkv, D);
    const int m0 = tile.m0, b = tile.b, h = tile.h, t_begin = tile.t_begin, t_end = tile.t_end;
    const u16 *kb = tile.kv(k, ksb, ksh), *vb = tile.kv(v, vsb, vsh);

    load_swizzled<D, BM, THREADS>(sq, q + b * qsb + h * qsh, qst, m0, T);
    if (t_begin < t_end) {
        load_kv_tile<D, BN, THREADS>(sk, sv, kb, kst, vb, vst, t_begin * BN, S);
    }
    cp_commit();

    float acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
    float row_max[2] = {neg_inf<float>(), neg_inf<float>()}, row_sum[2] = {0.f, 0.f};
    const float scale2 = scale * LOG2E;
    const int tile_m0 = m0 + wg * 64 + warp * 16, row0 = tile_m0 + g;  // this thread's rows: row0, row0 + 8
    const u32 q_rows = sq + wg * 64 * 128;                             // this warpgroup's 64 query rows

    for (int t = t_begin; t < t_end; ++t) {
        const int st = (t - t_begin) & 1, n0 = t * BN;
        if (t + 1 < t_end) {  // the next tile into the other stage (free since the barrier ending the last tile)
            load_kv_tile<D, BN, THREADS>(sk + (st ^ 1) * TILE, sv + (st ^ 1) * TILE, kb, kst, vb, vst, n0 + BN, S);
        }
        cp_commit();
        cp_wait<1>();  // this tile (and the queries) have landed
        fence_proxy_async();
        __syncthreads();

        float s[BN / 2];
        scores<BF16, D, BN, BM>(s, q_rows, sk + st * TILE);
        float alpha[2];
        softmax_tile<BN>(s, row_max, row_sum, alpha, tile.mask, tile_m0, row0, tq, n0, scale2);
        u32 p[BN / 16][4];
        add_pv<BF16, D, BN>(acc, s, alpha, p, sv + st * TILE);
        __syncthreads();  // every warpgroup is done with this stage before the next tile's loads reuse it
    }
    cp_wait<0>();

    const i64 head = (i64)b * H + h;
    store_rows<BF16, D>(o + b * osb + h * osh, ost, lse + head * T, acc, row_sum, row_max, row0, T, tq);
}

// ---------------------------------------------------------------- forward, warp-specialised

// The last of CW consumers hands consumer 0 the first turn of a ping-pong kernel (ws_consume's
// PINGPONG), once a block.
template <bool PINGPONG, int CW> __device__ __forceinline__ void ping_pong_start(int c) {
    if constexpr (PINGPONG) {
        if (c == CW - 1) named_arrive(2, 2 * FH_WARPGROUP);
    }
}

// A consumer warpgroup's sweep over its query tile's key/value tiles [t_begin, t_end) (hopper_fwd_ws
// and hopper_fwd_wsp): tile i of the sweep lies in stage (first + i) % STAGES, that stage's
// ((first + i) / STAGES)-th use, where `first` counts the tiles the block consumed before this sweep.
// q_done() runs once the warp's last product reading the queries has retired; with PERSISTENT the last
// tile's stage is handed back too (a block that stops after the sweep has no reason to).
// PINGPONG (two or three consumers, the overlapped loop; FlashAttention-3's inter-warpgroup schedule):
// consumer c issues each batch of products only in its turn, and hands the turn to consumer c + 1 (mod
// their number) as soon as they are issued, so the tensor cores run one warpgroup's products while the
// others compute their softmax, instead of all asking for them at once and all then waiting on the
// exponentials. Named barrier 2 + c is c's turn: it syncs there (its 128 threads) once the consumer
// before it has arrived (that one's 128). The kernel has the last consumer hand consumer 0 the first
// turn, once (ping_pong_start); all issue t_end - t_begin + 1 batches a sweep, so across sweeps (a
// persistent kernel's tiles) the turns keep going round, and at the end one hand-over to consumer 0 is
// left pending, as in FlashAttention-3 (a block's barriers start afresh at launch). These kernels also
// take FlashAttention-3's order within a batch: the scores' products are issued first, and O is
// rescaled while they run, before O += P V is issued.
template <bool BF16, int D, int BN, int BM, int STAGES, bool OVERLAP, bool PERSISTENT, bool PINGPONG = false,
          class QDone>
__device__ __forceinline__ void ws_consume(float* acc, float* s, float* alpha, u32 (*p)[4], float* row_max,
                                           float* row_sum, const Mask& mask, int tile_m0, int row0, int tq, int lane,
                                           float scale2, u32 q_rows, u32 sk, u32 sv, u32 full0, u32 empty0, int first,
                                           int t_begin, int t_end, QDone q_done, int c = 0) {
    constexpr int TILE = BN * D * 2;
    static_assert(!PINGPONG || OVERLAP, "ping-pong schedules the overlapped loop");
    constexpr int CW = BM / 64;
    static_assert(!PINGPONG || CW == 2 || CW == 3, "ping-pong takes turns between two or three consumers");
    auto my_turn = [&] {
        if constexpr (PINGPONG) named_sync(2 + c, 2 * FH_WARPGROUP);
    };
    auto pass_turn = [&] {
        if constexpr (PINGPONG) named_arrive(2 + (c + 1) % CW, 2 * FH_WARPGROUP);
    };
    auto wait_full = [&](int i) {
        mbar_wait(full0 + 8 * ((first + i) % STAGES), ((first + i) / STAGES) & 1);
        fence_proxy_async();  // (copies by the generic proxy, read next by wgmma)
    };
    auto release = [&](int i) {  // this warp's products reading tile i's stage have retired
        __syncwarp();
        if (lane == 0) mbar_arrive(empty0 + 8 * ((first + i) % STAGES));
    };
    auto stage = [&](int i) { return (first + i) % STAGES; };
    if constexpr (PERSISTENT) {
        if (t_begin >= t_end) q_done();
    }

    if constexpr (!OVERLAP) {
#pragma unroll 1
        for (int t = t_begin; t < t_end; ++t) {
            const int i = t - t_begin, st = stage(i);
            wait_full(i);
            scores<BF16, D, BN, BM>(s, q_rows, sk + st * TILE);
            if constexpr (PERSISTENT) {
                if (t + 1 == t_end) q_done();
            }
            softmax_tile<BN>(s, row_max, row_sum, alpha, mask, tile_m0, row0, tq, t * BN, scale2);
            add_pv<BF16, D, BN>(acc, s, alpha, p, sv + st * TILE);
            release(i);
        }
    } else {
        if (t_begin < t_end) {
            wait_full(0);
            if constexpr (PINGPONG) {  // scores(), its products issued in turn
                my_turn();
                wg_fence();
                issue_scores<BF16, D, BN, BM>(s, q_rows, sk + stage(0) * TILE);
                wg_commit();
                pass_turn();
                wg_wait<0>();
                hold<BN / 2>(s);
            } else {
                scores<BF16, D, BN, BM>(s, q_rows, sk + stage(0) * TILE);
            }
            softmax_tile<BN>(s, row_max, row_sum, alpha, mask, tile_m0, row0, tq, t_begin * BN, scale2);
        }
#pragma unroll 1
        for (int t = t_begin; t + 1 < t_end; ++t) {
            const int i = t - t_begin, st = stage(i), st1 = stage(i + 1);
            wg_wait<0>();  // O += P_{t-1} V_{t-1} has retired (none at t_begin)
            hold<D / 2>(acc);
            hold<BN / 2>(s);
            if (i > 0) release(i - 1);
            if constexpr (!PINGPONG) rescale_o<D>(acc, alpha);
            pack_p<BF16, BN>(s, p);
            wait_full(i + 1);
            my_turn();
            wg_fence();
            hold<D / 2>(acc);
            issue_scores<BF16, D, BN, BM>(s, q_rows, sk + st1 * TILE);
            wg_commit();
            if constexpr (PINGPONG) {
                // (FlashAttention-3's order: O's rescale, D / 2 multiplications, runs behind the scores'
                // products rather than ahead of them; O is free, P_{t-1} V_{t-1} having retired above)
                rescale_o<D>(acc, alpha);
                wg_fence();
                hold<D / 2>(acc);
            }
            issue_pv<BF16, D, BN>(acc, p, sv + st * TILE);
            wg_commit();
            pass_turn();
            wg_wait<1>();  // S_{t+1} has retired; P_t V_t may still be running
            hold<BN / 2>(s);
            softmax_tile<BN>(s, row_max, row_sum, alpha, mask, tile_m0, row0, tq, (t + 1) * BN, scale2);
        }
        if (t_begin < t_end) {  // the last tile's O += P V
            const int i = t_end - 1 - t_begin;
            if constexpr (PERSISTENT) q_done();  // (its scores retired above)
            wg_wait<0>();
            hold<D / 2>(acc);
            hold<BN / 2>(s);
            if (i > 0) release(i - 1);
            if constexpr (PINGPONG) {  // add_pv, its products issued in turn
                rescale_o<D>(acc, alpha);
                pack_p<BF16, BN>(s, p);
                my_turn();
                wg_fence();
                hold<D / 2>(acc);
                issue_pv<BF16, D, BN>(acc, p, sv + stage(i) * TILE);
                wg_commit();
                pass_turn();
                wg_wait<0>();
                hold<D / 2>(acc);
            } else {
                add_pv<BF16, D, BN>(acc, s, alpha, p, sv + stage(i) * TILE);
            }
            if constexpr (PERSISTENT) release(i);
        }
    }
}


// The warp-specialised forward (hopper_fwd_ws, in dev/cuda/flash_hopper_lab.cu, and its persistent form
// hopper_fwd_wsp below): hopper_fwd's function and arguments with FlashAttention-3's division of labour
// (Shah et al. 2024): warpgroup 0 is a producer that only copies (the block's queries once, then each
// key/value tile into one of STAGES stages, signalling the stage's "full" mbarrier as its copies land),
// and CW consumer warpgroups (the block's 64 CW queries, 64 each) only multiply and exponentiate, each at
// its own pace: a consumer waits for a stage's "full" barrier and, once its last product reading the
// stage has retired, arrives on the stage's "empty" barrier, which the producer waits for before reusing
// it. No __syncthreads in the loop: the consumers drift out of step, so one's softmax overlaps the
// other's products, and the copies' address work leaves the consumers' instruction stream. Within a
// consumer the loop is hopper_fwd_pipelined's (dev/cuda/flash_hopper_lab.cu: the next tile's scores and
// the current O += P V in flight during the softmax), or with OVERLAP false hopper_fwd's (one tile at a
// time: fewer registers, and at head dim 64 the other consumers already fill the softmax's gaps). The
// producer gives registers back (setmaxnreg) so the consumers can hold more.
// Dynamic shared memory: (64 CW + 2 STAGES BN) D 2 + 1024 bytes; 128 (CW + 1) threads.

// ---------------------------------------------------------------- forward, warp-specialised, persistent

// hopper_fwd_ws as a persistent kernel (FlashAttention-3's tile scheduler): a grid of about one block an
// SM, each block taking query tiles one after another, so the producer copies the next tile's keys,
// values and queries while the consumers still multiply, and later write, the current one. Without it
// every block starts with nothing to multiply until its first tiles land and ends storing its rows
// with the tensor cores idle; at short sequences (a few key tiles a query tile) that is much of a
// block's life. Work item w (QueryTile's second constructor: tile_order.cuh's order, the longest tiles
// first by sections of heads) goes to whichever block asks next: item blockIdx.x first, then gridDim.x + the count the
// producer's thread 0 takes from *next_work (0 at launch, and put back to 0 by the launch's last
// taker: launch.py's block_counters), so a block that drew short causal rows draws again sooner
// instead of a fixed share leaving some blocks with all the long ones.
// The item number reaches the producer's warps through a named barrier and the consumers through the
// queries' "full" barrier (one plain arrival, a release, besides the copies'), double-buffered by the
// item's parity. The queries' "empty" barrier (one arrival a consumer warp, once its last Q K^T has
// retired) lets the producer overwrite them; it first copies the item's first key/value tile, so that
// copy overlaps the consumers' last products. The key/value stages run on as one ring across items.
// Arguments: hopper_fwd_ws's, then heads = B H and next_work.
template <bool BF16, int D, int BN, int CW, int STAGES, int PRODUCER_REGS, int CONSUMER_REGS, bool OVERLAP,
          bool PINGPONG>
__device__ __forceinline__ void hopper_fwd_wsp(const u16* __restrict__ q, const u16* __restrict__ k,
                                               const u16* __restrict__ v, u16* __restrict__ o, float* __restrict__ lse,
                                               i64 qsb, i64 qsh, i64 qst, i64 ksb, i64 ksh, i64 kst, i64 vsb, i64 vsh,
                                               i64 vst, i64 osb, i64 osh, i64 ost, int H, int Hkv, int T, int S,
                                               float scale, int causal, int window, int heads, int* next_work) {
    constexpr int BM = 64 * CW, TILE = BN * D * 2;
    constexpr int ENTRY_REGS = (65536 / (FH_WARPGROUP * (CW + 1))) & ~7;  // (as in hopper_fwd_ws)
    static_assert(PRODUCER_REGS + CW * CONSUMER_REGS <= (CW + 1) * ENTRY_REGS, "registers the block does not hold");
    extern __shared__ __align__(1024) u16 smem[];
    // queries' full and empty, then full and empty by stage
    __shared__ __align__(8) u64 bars[2 + 2 * STAGES];
    __shared__ int work[2];  // item j's number in work[j & 1]
    const u32 base = (smem_u32(smem) + 1023u) & ~1023u;  // (the launcher asks for 1 KB more)
    const u32 sq = base, sk = sq + BM * D * 2, sv = sk + STAGES * TILE;  // stage st: sk + st * TILE, sv + st * TILE
    const u32 q_full = smem_u32(bars), q_empty = q_full + 8, full0 = q_empty + 8, empty0 = full0 + 8 * STAGES;
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2,
              tq = lane & 3;
    const Mask mask{T, S, S - T, causal, window};
    const int q_tiles = (T + BM - 1) / BM, items = q_tiles * heads;
    if (threadIdx.x == 0) {
        mbar_init(q_full, FH_WARPGROUP + 1);  // the producer's copies, and thread 0's release of the item number
        mbar_init(q_empty, 4 * CW);
        for (int st = 0; st < STAGES; ++st) {
            mbar_init(full0 + 8 * st, FH_WARPGROUP);
            mbar_init(empty0 + 8 * st, 4 * CW);
        }
    }
    __syncthreads();

    if (wg == 0) {  // ---- the producer
        regs_dec<PRODUCER_REGS>();
        int kv = 0;  // key/value tiles copied so far: the next goes into stage kv % STAGES
        for (int j = 0;; ++j) {
            if (threadIdx.x == 0) {
                int w = blockIdx.x;
                if (j > 0) {
                    const int taken = atomicAdd(next_work, 1);
                    w = gridDim.x + taken;
                    // Every block takes one number past the end, so the launch takes `items` in all: the
                    // block taking the last puts the counter back to 0 for the next launch.
                    if (taken == items - 1) atomicExch(next_work, 0);
                }
                work[j & 1] = w;
            }
            named_sync(1, FH_WARPGROUP);
            const int w = work[j & 1];
            if (w >= items) {  // no more: tell the consumers (after they are done with the last queries)
                if (j > 0) mbar_wait(q_empty, (j - 1) & 1);
                mbar_arrive(q_full);
                if (threadIdx.x == 0) mbar_arrive(q_full);
                break;
            }
            const QueryTile tile(mask, BM, BN, H, Hkv, D, w, q_tiles, heads);
            const u16 *kb = tile.kv(k, ksb, ksh), *vb = tile.kv(v, vsb, vsh);
            auto load_kv = [&](int t) {
                const int st = kv % STAGES;
                if (kv >= STAGES) mbar_wait(empty0 + 8 * st, ((kv / STAGES) - 1) & 1);  // its last tile is read
                load_kv_tile<D, BN, FH_WARPGROUP>(sk + st * TILE, sv + st * TILE, kb, kst, vb, vst, t * BN, S);
                mbar_arrive_copies(full0 + 8 * st);
                ++kv;
            };
            if (tile.t_begin < tile.t_end) load_kv(tile.t_begin);
            // (also keeps this item's arrivals on q_full out of the last item's phase, whose copy
            // arrivals land asynchronously: the consumers have seen that phase complete)
            if (j > 0) mbar_wait(q_empty, (j - 1) & 1);
            load_swizzled<D, BM, FH_WARPGROUP>(sq, q + tile.b * qsb + tile.h * qsh, qst, tile.m0, T);
            mbar_arrive_copies(q_full);
            if (threadIdx.x == 0) mbar_arrive(q_full);
            for (int t = tile.t_begin + 1; t < tile.t_end; ++t) load_kv(t);
        }
        cp_wait_all();
        return;
    }

    // ---- a consumer: warpgroup c = wg - 1 owns the queries m0 + 64 c.. of each item
    regs_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    const float scale2 = scale * LOG2E;
    const u32 q_rows = sq + c * 64 * 128;  // this warpgroup's 64 query rows
    float acc[D / 2], s[BN / 2], alpha[2], row_max[2], row_sum[2];
    u32 p[BN / 16][4];
    int first = 0;  // key/value tiles consumed before this item
    ping_pong_start<PINGPONG, CW>(c);
    for (int j = 0;; ++j) {
        mbar_wait(q_full, j & 1);
        const int w = work[j & 1];
        if (w >= items) break;
        fence_proxy_async();  // (the queries, copied by the generic proxy, read next by wgmma)
        const QueryTile tile(mask, BM, BN, H, Hkv, D, w, q_tiles, heads);
#pragma unroll
        for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
        row_max[0] = row_max[1] = neg_inf<float>();
        row_sum[0] = row_sum[1] = 0.f;
        const int tile_m0 = tile.m0 + c * 64 + warp * 16, row0 = tile_m0 + g;  // this thread's rows: row0, row0 + 8
        auto q_done = [&] {
            __syncwarp();
            if (lane == 0) mbar_arrive(q_empty);
        };
        ws_consume<BF16, D, BN, BM, STAGES, OVERLAP, true, PINGPONG>(acc, s, alpha, p, row_max, row_sum, mask, tile_m0,
                                                                    row0, tq, lane, scale2, q_rows, sk, sv, full0,
                                                                    empty0, first, tile.t_begin, tile.t_end, q_done, c);
        first += max(0, tile.t_end - tile.t_begin);
        const i64 head = (i64)tile.b * H + tile.h;
        store_rows<BF16, D>(o + tile.b * osb + tile.h * osh, ost, lse + head * T, acc, row_sum, row_max, row0, T, tq);
    }
}
#endif  // FH_ENABLED

// ---------------------------------------------------------------- extern "C" entry points
// Every forward entry point's parameters (flash_fwd's, without dropout), and the same as arguments.
#define FH_PARAMS                                                                                                \
    const u16 *q, const u16 *k, const u16 *v, u16 *o, float *lse, i64 qsb, i64 qsh, i64 qst, i64 ksb, i64 ksh,  \
        i64 kst, i64 vsb, i64 vsh, i64 vst, i64 osb, i64 osh, i64 ost, int H, int Hkv, int T, int S, float scale, \
        int causal, int window
#define FH_ARGS \
    q, k, v, o, lse, qsb, qsh, qst, ksb, ksh, kst, vsb, vsh, vst, osb, osh, ost, H, Hkv, T, S, scale, causal, window

// hopper_fwd_{bf16,f16}_d{D}_n{BN}_w{WGS}: BN keys per tile, 64 WGS queries per block (WGS warpgroups).
#if defined(FH_ENABLED)
#define FH_BODY(BF, D, BN, WGS) hopper_fwd<BF, D, BN, WGS>(FH_ARGS);
#else
#define FH_BODY(BF, D, BN, WGS)
#endif
// (d64 n128 w1 capped at 168 registers, three blocks an SM: 170 would leave two)
#define FH_MIN_BLOCKS(D, BN, WGS) ((D) == 64 && (BN) == 128 && (WGS) == 1 ? 3 : 1)
#define FH_FWD(NAME, BF, D, BN, WGS)                                                                      \
    extern "C" __global__ void __launch_bounds__(FH_WARPGROUP * WGS, FH_MIN_BLOCKS(D, BN, WGS))         \
        hopper_fwd_##NAME##_d##D##_n##BN##_w##WGS(FH_PARAMS) {                                            \
        FH_BODY(BF, D, BN, WGS)                                                                           \
    }
// Here the one flash_attention.py runs (flash_variants.HOPPER_TILES); dev/cuda/flash_hopper_lab.cu holds the others.
#define FH_ALL(NAME, BF) FH_FWD(NAME, BF, 64, 128, 1)
FH_ALL(bf16, true)
FH_ALL(f16, false)

// The warp-specialised kernels (hopper_fwd_ws's _ws, dev/cuda/flash_hopper_lab.cu, and hopper_fwd_wsp's
// _wsp below): the forward's arguments; 128 (CW + 1) threads, dynamic shared memory
// (64 CW + 2 STAGES BN) D 2 + 1024 bytes (STAGES: FH_WS_STAGES). The registers a thread has:
// 65536 / threads at entry, then the producer's and the consumers' counts.
#define FH_WS_STAGES(D, BN, CW) ((D) == 128 && (CW) == 2 ? 3 : 2)
// setmaxnreg.inc waits until the block's warps have handed back enough registers: what the consumers
// take must not exceed what the block was launched with (hence the static_assert in hopper_fwd_ws).
#define FH_WS_PRODUCER_REGS(CW) ((CW) == 2 ? 24 : 32)
#define FH_WS_CONSUMER_REGS(CW) ((CW) == 2 ? 240 : 160)
// hopper_fwd_ws's template arguments after BF, D, BN, CW
#define FH_WS_REGS(D, BN, CW) FH_WS_STAGES(D, BN, CW), FH_WS_PRODUCER_REGS(CW), FH_WS_CONSUMER_REGS(CW)
// hopper_fwd_{bf16,f16}_d{D}_n{BN}_c{CW}_wsp (overlapped consumers), _wssp (one tile at a time) and
// _wsp_pp (overlapped, products issued in turns): the persistent variants, the _ws kernels' arguments
// followed by heads (B H) and next_work (an int, 0 at launch and after it); a grid of at most one
// block an SM, the _ws kernels' threads and shared memory.
#if defined(FH_ENABLED)
#define FH_BODY_WSP(BF, D, BN, CW, OVERLAP, PINGPONG) \
    hopper_fwd_wsp<BF, D, BN, CW, FH_WS_REGS(D, BN, CW), OVERLAP, PINGPONG>(FH_ARGS, heads, next_work);
#else
#define FH_BODY_WSP(BF, D, BN, CW, OVERLAP, PINGPONG)
#endif
#define FH_FWD_WSP(NAME, BF, D, BN, CW, OVERLAP, PINGPONG, TAIL)                                          \
    extern "C" __global__ void __launch_bounds__(FH_WARPGROUP * ((CW) + 1), 1)                            \
        hopper_fwd_##NAME##_d##D##_n##BN##_c##CW##TAIL(FH_PARAMS, int heads, int* next_work) {            \
        FH_BODY_WSP(BF, D, BN, CW, OVERLAP, PINGPONG)                                                     \
    }
// Here the one flash_attention.py runs (flash_variants.HOPPER_TILES); dev/cuda/flash_hopper_lab.cu holds the others.
#define FH_ALL_WSP(NAME, BF) FH_FWD_WSP(NAME, BF, 128, 128, 2, true, false, _wsp)
FH_ALL_WSP(bf16, true)
FH_ALL_WSP(f16, false)
