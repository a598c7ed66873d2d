// The lab's Hopper forward kernels: every flash-attention forward variant of dev/cuda/flash_variants.py
// that gradcraft does not run (the package's kernels/flash_hopper.cu holds the ones it does,
// flash_variants.HOPPER_TILES). It includes that file, whose helpers, warp-specialised consumer loop and
// persistent kernel these build on, and adds the software-pipelined kernel (_p), the non-persistent
// warp-specialised one (_ws, _wss, _ws_pp) and the other tile sizes of hopper_fwd and hopper_fwd_wsp.
// Build and check: dev/cuda/README.md.
//
// hopper_fwd_pipelined (the _p kernels) computes the same thing with FlashAttention-3's intra-warpgroup
// overlap (Shah et al. 2024, Algorithm 2): in hopper_fwd a warpgroup's tensor cores idle while it works
// out the softmax (as long as the two products at head dim 64), so here each iteration t issues the
// next tile's scores S_{t+1} = Q K_{t+1}^T and then O += P_t V_t, both asynchronously, waits for the
// scores alone and computes their softmax (P_{t+1} and O's rescale factors) while O's product still
// runs, and only then waits for it and rescales O. The loads run two tiles ahead, staged three deep
// (stage = tile index % 3): at the top of iteration t tile t + 1 must have landed (S_{t+1} reads its
// keys), V_t is still being read, and tile t + 2 goes into the stage tile t - 1 has left.
#include "flash_hopper.cu"

#if defined(FH_ENABLED)

// ---------------------------------------------------------------- forward, software-pipelined

// hopper_fwd's function and arguments, pipelined (the file's header). The launcher's dynamic shared
// memory is (64 WGS + 6 BN) D 2 + 1024 bytes: the queries, three stages of keys, three of values.
template <bool BF16, int D, int BN, int WGS>
__device__ __forceinline__ void hopper_fwd_pipelined(const u16* __restrict__ q, const u16* __restrict__ k,
                                                     const u16* __restrict__ v, u16* __restrict__ o,
                                                     float* __restrict__ lse, i64 qsb, i64 qsh, i64 qst, i64 ksb,
                                                     i64 ksh, i64 kst, i64 vsb, i64 vsh, i64 vst, i64 osb, i64 osh,
                                                     i64 ost, int H, int Hkv, int T, int S, float scale, int causal,
                                                     int window) {
    constexpr int BM = 64 * WGS, THREADS = FH_WARPGROUP * WGS, TILE = BN * D * 2;
    extern __shared__ __align__(1024) u16 smem[];
    const u32 base = (smem_u32(smem) + 1023u) & ~1023u;  // (the launcher asks for 1 KB more)
    const u32 sq = base, sk = sq + BM * D * 2, sv = sk + 3 * TILE;  // stage st: sk + st * TILE, sv + st * TILE
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2,
              tq = lane & 3;
    const QueryTile tile(Mask{T, S, S - T, causal, window}, BM, BN, H, Hkv, D);
    const int m0 = tile.m0, b = tile.b, h = tile.h, t_begin = tile.t_begin, t_end = tile.t_end;
    const u16 *kb = tile.kv(k, ksb, ksh), *vb = tile.kv(v, vsb, vsh);

    // Two cp.async groups: the queries with tile t_begin (stage 0), then tile t_begin + 1 (stage 1).
    load_swizzled<D, BM, THREADS>(sq, q + b * qsb + h * qsh, qst, m0, T);
    if (t_begin < t_end) {
        load_kv_tile<D, BN, THREADS>(sk, sv, kb, kst, vb, vst, t_begin * BN, S);
    }
    cp_commit();
    if (t_begin + 1 < t_end) {
        load_kv_tile<D, BN, THREADS>(sk + TILE, sv + TILE, kb, kst, vb, vst, (t_begin + 1) * BN, S);
    }
    cp_commit();

    float acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
    float row_max[2] = {neg_inf<float>(), neg_inf<float>()}, row_sum[2] = {0.f, 0.f};
    const float scale2 = scale * LOG2E;
    const int tile_m0 = m0 + wg * 64 + warp * 16, row0 = tile_m0 + g;  // this thread's rows: row0, row0 + 8
    const u32 q_rows = sq + wg * 64 * 128;                             // this warpgroup's 64 query rows

    // Carried from one iteration to the next: s, tile t's P in float32 (softmax done, not yet rounded), and
    // alpha, the factors by which O must be rescaled before P_t V_t is added.
    float s[BN / 2], alpha[2];
    u32 p[BN / 16][4];  // P_t rounded: O += P_t V_t's register operand
    if (t_begin < t_end) {  // the first tile's P, so that every iteration has a P to multiply
        cp_wait<1>();       // the queries and tile t_begin have landed
        fence_proxy_async();
        __syncthreads();
        scores<BF16, D, BN, BM>(s, q_rows, sk);
        softmax_tile<BN>(s, row_max, row_sum, alpha, tile.mask, tile_m0, row0, tq, t_begin * BN, scale2);
    }

    // Iteration t: O += P_t V_t overlapped with the softmax of tile t + 1. The wait for the product of
    // iteration t - 1 opens iteration t rather than closing t - 1: ptxas schedules a wgmma wait as early
    // as it can within a basic block, and after the softmax it went above the exponentials (so the
    // product ran alone); across the loop's branch it stays after them.
#pragma unroll 1
    for (int t = t_begin; t + 1 < t_end; ++t) {
        const int i = t - t_begin, st = i % 3, st1 = (i + 1) % 3, st2 = (i + 2) % 3;
        wg_wait<0>();  // O += P_{t-1} V_{t-1} has retired (none at t_begin)
        hold<D / 2>(acc);
        hold<BN / 2>(s);
        // P_t is written into p only now: ptxas serializes every wgmma of the kernel (C7513) if an
        // in-flight product's register operand is redefined, as P_{t-1}'s registers would be before the wait.
        rescale_o<D>(acc, alpha);
        pack_p<BF16, BN>(s, p);

        cp_wait<0>();  // tile t + 1 (this thread's copies: the only group in flight) has landed
        fence_proxy_async();
        // Every thread's copies of tile t + 1 are visible to wgmma, and every warpgroup has retired
        // O += P_{t-1} V_{t-1} (and S_{t-1} before it), the last reads of tile t - 1's stage st2.
        __syncthreads();
        if (t + 2 < t_end) {  // into st2; this iteration's products read st1's keys and st's values
            load_kv_tile<D, BN, THREADS>(sk + st2 * TILE, sv + st2 * TILE, kb, kst, vb, vst, (t + 2) * BN, S);
        }
        cp_commit();

        // Two wgmma groups: S_{t+1} = Q K_{t+1}^T (needed first), then O += P_t V_t.
        wg_fence();  // (acc, p and s have just been written by ordinary instructions)
        hold<D / 2>(acc);
        issue_scores<BF16, D, BN, BM>(s, q_rows, sk + st1 * TILE);
        wg_commit();
        issue_pv<BF16, D, BN>(acc, p, sv + st * TILE);
        wg_commit();

        wg_wait<1>();  // S_{t+1} has retired; P_t V_t may still be running: acc and p stay untouched
        hold<BN / 2>(s);
        softmax_tile<BN>(s, row_max, row_sum, alpha, tile.mask, tile_m0, row0, tq, (t + 1) * BN, scale2);
    }
    if (t_begin < t_end) {  // the last tile's O += P V (its values landed with its keys)
        const int st = (t_end - 1 - t_begin) % 3;
        wg_wait<0>();
        hold<D / 2>(acc);
        hold<BN / 2>(s);
        add_pv<BF16, D, BN>(acc, s, alpha, p, sv + st * TILE);
    }
    cp_wait<0>();  // (a block with no tile still has the queries' copies in flight)

    const i64 head = (i64)b * H + h;
    store_rows<BF16, D>(o + b * osb + h * osh, ost, lse + head * T, acc, row_sum, row_max, row0, T, tq);
}

// ---------------------------------------------------------------- forward, warp-specialised

// hopper_fwd_ws: the warp-specialised forward (flash_hopper.cu describes it, above hopper_fwd_wsp).
template <bool BF16, int D, int BN, int CW, int STAGES, int PRODUCER_REGS, int CONSUMER_REGS, bool OVERLAP,
          bool PINGPONG>
__device__ __forceinline__ void hopper_fwd_ws(const u16* __restrict__ q, const u16* __restrict__ k,
                                              const u16* __restrict__ v, u16* __restrict__ o, float* __restrict__ lse,
                                              i64 qsb, i64 qsh, i64 qst, i64 ksb, i64 ksh, i64 kst, i64 vsb, i64 vsh,
                                              i64 vst, i64 osb, i64 osh, i64 ost, int H, int Hkv, int T, int S,
                                              float scale, int causal, int window) {
    constexpr int BM = 64 * CW, TILE = BN * D * 2;
    // __launch_bounds__(128 (CW + 1), 1) caps a thread at 65536 / threads registers, rounded down to 8;
    // a block holds that many for each thread, and setmaxnreg only moves them between its warpgroups
    // (asking for more than the producer gave back would wait forever)
    constexpr int ENTRY_REGS = (65536 / (FH_WARPGROUP * (CW + 1))) & ~7;
    static_assert(PRODUCER_REGS + CW * CONSUMER_REGS <= (CW + 1) * ENTRY_REGS, "registers the block does not hold");
    extern __shared__ __align__(1024) u16 smem[];
    __shared__ __align__(8) u64 bars[1 + 2 * STAGES];  // queries' full, then full and empty by stage
    const u32 base = (smem_u32(smem) + 1023u) & ~1023u;  // (the launcher asks for 1 KB more)
    const u32 sq = base, sk = sq + BM * D * 2, sv = sk + STAGES * TILE;  // stage st: sk + st * TILE, sv + st * TILE
    const u32 q_full = smem_u32(bars), full0 = q_full + 8, empty0 = full0 + 8 * STAGES;  // stage st: + 8 st
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2,
              tq = lane & 3;
    const QueryTile tile(Mask{T, S, S - T, causal, window}, BM, BN, H, Hkv, D);
    const int m0 = tile.m0, b = tile.b, h = tile.h, t_begin = tile.t_begin, t_end = tile.t_end;
    if (threadIdx.x == 0) {
        mbar_init(q_full, FH_WARPGROUP);
        for (int st = 0; st < STAGES; ++st) {
            mbar_init(full0 + 8 * st, FH_WARPGROUP);  // each producer thread, once its copies land
            mbar_init(empty0 + 8 * st, 4 * CW);       // one lane of each consumer warp
        }
    }
    __syncthreads();

    if (wg == 0) {  // ---- the producer
        regs_dec<PRODUCER_REGS>();
        const u16 *kb = tile.kv(k, ksb, ksh), *vb = tile.kv(v, vsb, vsh);
        load_swizzled<D, BM, FH_WARPGROUP>(sq, q + b * qsb + h * qsh, qst, m0, T);
        mbar_arrive_copies(q_full);
        for (int t = t_begin; t < t_end; ++t) {
            const int i = t - t_begin, st = i % STAGES;
            if (i >= STAGES) mbar_wait(empty0 + 8 * st, ((i / STAGES) - 1) & 1);  // its last tile is read
            load_kv_tile<D, BN, FH_WARPGROUP>(sk + st * TILE, sv + st * TILE, kb, kst, vb, vst, t * BN, S);
            mbar_arrive_copies(full0 + 8 * st);
        }
        cp_wait_all();  // (the copies are never committed as groups: cp_wait would not cover them)
        return;
    }

    // ---- a consumer: warpgroup c = wg - 1 owns the queries m0 + 64 c..
    regs_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    float acc[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
    float row_max[2] = {neg_inf<float>(), neg_inf<float>()}, row_sum[2] = {0.f, 0.f};
    const float scale2 = scale * LOG2E;
    const int tile_m0 = m0 + c * 64 + warp * 16, row0 = tile_m0 + g;  // this thread's rows: row0, row0 + 8
    const u32 q_rows = sq + c * 64 * 128;                             // this warpgroup's 64 query rows
    float s[BN / 2], alpha[2];
    u32 p[BN / 16][4];
    ping_pong_start<PINGPONG, CW>(c);
    mbar_wait(q_full, 0);
    ws_consume<BF16, D, BN, BM, STAGES, OVERLAP, false, PINGPONG>(acc, s, alpha, p, row_max, row_sum, tile.mask,
                                                                 tile_m0, row0, tq, lane, scale2, q_rows, sk, sv, full0,
                                                                 empty0, 0, t_begin, t_end, [] {}, c);

    const i64 head = (i64)b * H + h;
    store_rows<BF16, D>(o + b * osb + h * osh, ost, lse + head * T, acc, row_sum, row_max, row0, T, tq);
}
#endif  // FH_ENABLED

// ---------------------------------------------------------------- extern "C" entry points
// hopper_fwd_{bf16,f16}_d{D}_n{BN}_w{WGS}: flash_hopper.cu's FH_FWD at the tile sizes it does not build.
#define FH_LAB_ALL(NAME, BF)                                                                              \
    FH_FWD(NAME, BF, 64, 64, 1) FH_FWD(NAME, BF, 64, 64, 2) FH_FWD(NAME, BF, 64, 128, 2)                  \
        FH_FWD(NAME, BF, 128, 64, 2) FH_FWD(NAME, BF, 128, 128, 1) FH_FWD(NAME, BF, 128, 128, 2)
FH_LAB_ALL(bf16, true)
FH_LAB_ALL(f16, false)

// hopper_fwd_{bf16,f16}_d{D}_n{BN}_w{WGS}_p: the pipelined variant, same arguments; dynamic shared memory
// (64 WGS + 6 BN) D 2 + 1024 bytes.
#if defined(FH_ENABLED)
#define FH_BODY_P(BF, D, BN, WGS) hopper_fwd_pipelined<BF, D, BN, WGS>(FH_ARGS);
#else
#define FH_BODY_P(BF, D, BN, WGS)
#endif
#define FH_FWD_P(NAME, BF, D, BN, WGS)                                                                    \
    extern "C" __global__ void __launch_bounds__(FH_WARPGROUP * WGS, 1)                                   \
        hopper_fwd_##NAME##_d##D##_n##BN##_w##WGS##_p(FH_PARAMS) {                                        \
        FH_BODY_P(BF, D, BN, WGS)                                                                         \
    }
#define FH_ALL_P(NAME, BF)                                                                                \
    FH_FWD_P(NAME, BF, 64, 64, 1) FH_FWD_P(NAME, BF, 64, 64, 2) FH_FWD_P(NAME, BF, 64, 128, 2)            \
        FH_FWD_P(NAME, BF, 128, 64, 2) FH_FWD_P(NAME, BF, 128, 128, 2)
FH_ALL_P(bf16, true)
FH_ALL_P(f16, false)

#if defined(FH_ENABLED)
#define FH_BODY_WS(BF, D, BN, CW, OVERLAP, PINGPONG) \
    hopper_fwd_ws<BF, D, BN, CW, FH_WS_REGS(D, BN, CW), OVERLAP, PINGPONG>(FH_ARGS);
#else
#define FH_BODY_WS(BF, D, BN, CW, OVERLAP, PINGPONG)
#endif
#define FH_FWD_WS(NAME, BF, D, BN, CW, OVERLAP, PINGPONG, TAIL)                                           \
    extern "C" __global__ void __launch_bounds__(FH_WARPGROUP * ((CW) + 1), 1)                            \
        hopper_fwd_##NAME##_d##D##_n##BN##_c##CW##TAIL(FH_PARAMS) {                                       \
        FH_BODY_WS(BF, D, BN, CW, OVERLAP, PINGPONG)                                                      \
    }
// _ws: the consumers' loop overlapped (pipelined); _wss: one tile at a time; _ws_pp: _ws with the
// consumers' products issued in turns (ws_consume's PINGPONG)
#define FH_ALL_WS(NAME, BF)                                                                               \
    FH_FWD_WS(NAME, BF, 64, 128, 2, true, false, _ws) FH_FWD_WS(NAME, BF, 64, 128, 3, true, false, _ws)   \
        FH_FWD_WS(NAME, BF, 128, 128, 2, true, false, _ws)                                                \
        FH_FWD_WS(NAME, BF, 64, 128, 2, false, false, _wss) FH_FWD_WS(NAME, BF, 64, 128, 3, false, false, _wss) \
        FH_FWD_WS(NAME, BF, 128, 128, 2, false, false, _wss)                                              \
        FH_FWD_WS(NAME, BF, 64, 128, 2, true, true, _ws_pp) FH_FWD_WS(NAME, BF, 64, 128, 3, true, true, _ws_pp) \
        FH_FWD_WS(NAME, BF, 128, 128, 2, true, true, _ws_pp)
FH_ALL_WS(bf16, true)
FH_ALL_WS(f16, false)

// the persistent variants flash_hopper.cu does not build (its FH_FWD_WSP)
#define FH_LAB_ALL_WSP(NAME, BF)                                                                          \
    FH_FWD_WSP(NAME, BF, 64, 128, 2, true, false, _wsp) FH_FWD_WSP(NAME, BF, 64, 128, 3, true, false, _wsp) \
        FH_FWD_WSP(NAME, BF, 64, 128, 2, false, false, _wssp)                                             \
        FH_FWD_WSP(NAME, BF, 64, 128, 2, true, true, _wsp_pp) FH_FWD_WSP(NAME, BF, 64, 128, 3, true, true, _wsp_pp) \
        FH_FWD_WSP(NAME, BF, 128, 128, 2, true, true, _wsp_pp)
FH_LAB_ALL_WSP(bf16, true)
FH_LAB_ALL_WSP(f16, false)
