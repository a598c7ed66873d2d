// Flash attention's forward pass on Hopper's warpgroup tensor-core instructions (wgmma, sm_90a): the
// same function as flash_attention.cu's flash_fwd (same arguments, outputs and masks; no dropout),
// with each block's two warpgroups multiplying 64 x N tiles straight out of shared memory instead of
// each warp feeding 16 x 8 products through ldmatrix (FlashAttention-3, Shah et al. 2024).
//
// A block owns 128 queries (warpgroup w the rows 64 w..) of one head and sweeps the key/value tiles
// of BN keys they may see, staged two deep by cp.async: while a tile is used, the next one loads.
// Per tile: S = Q K^T (wgmma, both operands in shared memory), the mask and the online softmax on the
// accumulator registers, then O += P V with P (rounded to 16 bits) as wgmma's register operand; the
// accumulator's layout (a warp's 16 rows, lane l holding rows l / 4 and l / 4 + 8, columns
// 8 j + 2 (l % 4) and the next) is exactly the register operand's layout, so P never leaves registers.
//
// Shared tiles are "swizzled 128-byte" tiles (wgmma's SWIZZLE_128B layout): a tile of R rows and D
// columns is D / 64 column blocks of R rows of 128 bytes, the 16-byte chunk c of row r stored at chunk
// c ^ (r % 8) (so the eight rows an 8 x 8 core matrix spans sit in distinct banks), 1024-byte aligned.
// Read as K-major (the k index along a row: Q and K for S = Q K^T), a descriptor's stride byte offset is
// the 1024 bytes between 8-row groups, and a k-step of 16 columns moves 32 bytes along the row (the
// next column block past 64). Read as MN-major (V for P V: keys down, head dims along a row), the
// stride byte offset is again the 1024 bytes between 8-row (8-key) groups, the leading byte offset
// the distance between 64-column blocks, and a k-step of 16 keys moves 2048 bytes.
//
// Compiled for sm_90a only (compiler.hopper_function); for any other target the kernels are empty and
// backend/cuda/attention.py does not launch them.
#include "common.cuh"
#include "flash.cuh"

#define FH_THREADS 256  // two warpgroups
#define FH_BLOCK_M 128

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FH_ENABLED 1

// ---------------------------------------------------------------- wgmma wrappers
// d (64 x N, float32; 16-row slices a warp) = (accumulate ? d : 0) + A (64 x 16) B (16 x N).
// _ss_: A and B from shared-memory descriptors, both K-major. _rs_: A from registers (four 32-bit
// registers of 16-bit pairs, mma.sync's A layout per warp), B MN-major (transposed).

__device__ __forceinline__ void wgmma_ss_m64n64k16_bf16(float* d, u64 da, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_rs_m64n64k16_bf16(float* d, const u32* a, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_ss_m64n128k16_bf16(float* d, u64 da, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_rs_m64n128k16_bf16(float* d, const u32* a, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_ss_m64n64k16_f16(float* d, u64 da, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_rs_m64n64k16_f16(float* d, const u32* a, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_ss_m64n128k16_f16(float* d, u64 da, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_rs_m64n128k16_f16(float* d, const u32* a, u64 db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}


__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared memory written by cp.async (the generic proxy) and next read by wgmma (the async proxy).
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keep the compiler from moving reads or writes of accumulator registers across an asynchronous wgmma.
template <int N> __device__ __forceinline__ void hold(float* d) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <bool BF16, int N> __device__ __forceinline__ void mma_ss(float* d, u64 da, u64 db, int accumulate) {
    if constexpr (BF16 && N == 64) wgmma_ss_m64n64k16_bf16(d, da, db, accumulate);
    else if constexpr (BF16 && N == 128) wgmma_ss_m64n128k16_bf16(d, da, db, accumulate);
    else if constexpr (N == 64) wgmma_ss_m64n64k16_f16(d, da, db, accumulate);
    else wgmma_ss_m64n128k16_f16(d, da, db, accumulate);
}
template <bool BF16, int N> __device__ __forceinline__ void mma_rs(float* d, const u32* a, u64 db, int accumulate) {
    if constexpr (BF16 && N == 64) wgmma_rs_m64n64k16_bf16(d, a, db, accumulate);
    else if constexpr (BF16 && N == 128) wgmma_rs_m64n128k16_bf16(d, a, db, accumulate);
    else if constexpr (N == 64) wgmma_rs_m64n64k16_f16(d, a, db, accumulate);
    else wgmma_rs_m64n128k16_f16(d, a, db, accumulate);
}

// ---------------------------------------------------------------- swizzled tiles and descriptors

// A shared-memory matrix descriptor in the 128-byte swizzle mode: start address, leading and stride
// byte offsets (each in 16-byte units), layout type 1 (SWIZZLE_128B) in bits 62-63.
__device__ __forceinline__ u64 desc128(u32 addr, u32 leading_bytes, u32 stride_bytes) {
    return (u64)((addr & 0x3FFFFu) >> 4) | ((u64)(leading_bytes >> 4) << 16) | ((u64)(stride_bytes >> 4) << 32) |
           (1ull << 62);
}
// k-step kk (columns 16 kk..) of a K-major tile of R rows starting at `tile` (its first row here).
template <int R> __device__ __forceinline__ u64 desc_k(u32 tile, int kk) {
    return desc128(tile + (kk >> 2) * (R * 128) + (kk & 3) * 32, 16, 1024);
}
// k-step kk (rows 16 kk..) of an MN-major tile of R rows.
template <int R> __device__ __forceinline__ u64 desc_mn(u32 tile, int kk) {
    return desc128(tile + kk * 2048, R * 128, 1024);
}

// R rows of D 16-bit values, global rows row0.. (stride elements; rows past `rows` read as zeros), into
// the swizzled tile at shared address s.
template <int D, int R>
__device__ __forceinline__ void load_swizzled(u32 s, const u16* g, i64 stride, int row0, int rows) {
    constexpr int CHUNKS = D / 8;
#pragma unroll 4
    for (int idx = threadIdx.x; idx < R * CHUNKS; idx += FH_THREADS) {
        const int r = idx / CHUNKS, c = idx - r * CHUNKS, row = row0 + r;
        const bool ok = row < rows;
        const u32 dst = s + (c >> 3) * (R * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
        cp_async16(dst, ok ? g + (i64)row * stride + c * 8 : g, ok ? 16 : 0);
    }
}

// ---------------------------------------------------------------- forward

template <bool BF16, int D, int BN>
__device__ __forceinline__ void hopper_fwd(const u16* __restrict__ q, const u16* __restrict__ k,
                                           const u16* __restrict__ v, u16* __restrict__ o, float* __restrict__ lse,
                                           i64 qsb, i64 qsh, i64 qst, i64 ksb, i64 ksh, i64 kst, i64 vsb, i64 vsh,
                                           i64 vst, i64 osb, i64 osh, i64 ost, int H, int Hkv, int T, int S,
                                           float scale, int causal, int window) {
    constexpr int BM = FH_BLOCK_M, NT = BN / 8, DT = D / 8, TILE = BN * D * 2;
    extern __shared__ __align__(1024) u16 smem[];
    const u32 base = (smem_u32(smem) + 1023u) & ~1023u;  // (the launcher asks for 1 KB more)
    const u32 sq = base, sk = sq + BM * D * 2, sv = sk + 2 * TILE;  // stage st: sk + st * TILE, sv + st * TILE
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2,
              tq = lane & 3;
    const QueryTile tile(Mask{T, S, S - T, causal, window}, BM, BN, H, Hkv);
    const int m0 = tile.m0, b = tile.b, h = tile.h, t_begin = tile.t_begin, t_end = tile.t_end;
    const u16 *kb = tile.kv(k, ksb, ksh), *vb = tile.kv(v, vsb, vsh);

    load_swizzled<D, BM>(sq, q + b * qsb + h * qsh, qst, m0, T);
    if (t_begin < t_end) {
        load_swizzled<D, BN>(sk, kb, kst, t_begin * BN, S);
        load_swizzled<D, BN>(sv, vb, vst, t_begin * BN, S);
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
            load_swizzled<D, BN>(sk + (st ^ 1) * TILE, kb, kst, n0 + BN, S);
            load_swizzled<D, BN>(sv + (st ^ 1) * TILE, vb, vst, n0 + BN, S);
        }
        cp_commit();
        cp_wait<1>();  // this tile (and the queries) have landed
        fence_proxy_async();
        __syncthreads();

        float s[BN / 2];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) mma_ss<BF16, BN>(s, desc_k<BM>(q_rows, kk), desc_k<BN>(sk + st * TILE, kk), kk);
        wg_commit();
        wg_wait<0>();
        hold<BN / 2>(s);

        if (!tile.mask.full(tile_m0, tile_m0 + 16, n0, n0 + BN)) {
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (!tile.mask.ok(row0 + (e >> 1) * 8, n0 + nt * 8 + 2 * tq + (e & 1))) s[nt * 4 + e] = neg_inf<float>();
        }
        // Online softmax in base 2 on unscaled scores (as flash_attention.cu's forward).
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = neg_inf<float>();
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt * 4 + 2 * r], s[nt * 4 + 2 * r + 1]));
            mx = fmaxf(mx * scale2, row_max[r]);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float shift = mx == neg_inf<float>() ? 0.f : mx;  // a row with nothing visible yet
            const float alpha = fast_exp2(row_max[r] - shift);
            row_max[r] = mx;
            row_sum[r] *= alpha;
#pragma unroll
            for (int dt = 0; dt < DT; ++dt) acc[dt * 4 + 2 * r] *= alpha, acc[dt * 4 + 2 * r + 1] *= alpha;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const float p0 = fast_exp2(fmaf(s[nt * 4 + 2 * r], scale2, -shift));
                const float p1 = fast_exp2(fmaf(s[nt * 4 + 2 * r + 1], scale2, -shift));
                s[nt * 4 + 2 * r] = p0, s[nt * 4 + 2 * r + 1] = p1;
                row_sum[r] += p0 + p1;
            }
        }
        u32 p[BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
            for (int i = 0; i < 4; ++i) p[kk][i] = pack2<BF16>(s[kk * 8 + 2 * i], s[kk * 8 + 2 * i + 1]);

        wg_fence();
        hold<D / 2>(acc);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) mma_rs<BF16, D>(acc, p[kk], desc_mn<BN>(sv + st * TILE, kk), 1);
        wg_commit();
        wg_wait<0>();
        hold<D / 2>(acc);
        __syncthreads();  // every warpgroup is done with this stage before the next tile's loads reuse it
    }
    cp_wait<0>();

    const i64 out_row = ((i64)b * H + h) * T;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = row_sum[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = row0 + r * 8;
        if (row >= T) continue;
        const float inv = l > 0.f ? 1.f / l : 0.f;  // rows that see no key come out as zeros
        u32* orow = (u32*)(o + b * osb + h * osh + row * ost);
#pragma unroll
        for (int dt = 0; dt < DT; ++dt) orow[dt * 4 + tq] = pack2<BF16>(acc[dt * 4 + 2 * r] * inv, acc[dt * 4 + 2 * r + 1] * inv);
        if (tq == 0) lse[out_row + row] = l > 0.f ? (row_max[r] + log2f(l)) * LN2 : neg_inf<float>();
    }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// ---------------------------------------------------------------- extern "C" entry points
// hopper_fwd_{bf16,f16}_d{64,128}_n{64,128}: BN keys per tile; flash_fwd's arguments without dropout.
#if defined(FH_ENABLED)
#define FH_BODY(BF, D, BN)                                                                                  \
    hopper_fwd<BF, D, BN>(q, k, v, o, lse, qsb, qsh, qst, ksb, ksh, kst, vsb, vsh, vst, osb, osh, ost, H, Hkv, T, \
                          S, scale, causal, window);
#else
#define FH_BODY(BF, D, BN)
#endif
#define FH_FWD(NAME, BF, D, BN)                                                                                   \
    extern "C" __global__ void __launch_bounds__(FH_THREADS, 1) hopper_fwd_##NAME##_d##D##_n##BN(                \
        const u16* q, const u16* k, const u16* v, u16* o, float* lse, i64 qsb, i64 qsh, i64 qst, i64 ksb, i64 ksh, \
        i64 kst, i64 vsb, i64 vsh, i64 vst, i64 osb, i64 osh, i64 ost, int H, int Hkv, int T, int S, float scale,  \
        int causal, int window) {                                                                                 \
        FH_BODY(BF, D, BN)                                                                                        \
    }
#define FH_ALL(NAME, BF) FH_FWD(NAME, BF, 64, 64) FH_FWD(NAME, BF, 64, 128) FH_FWD(NAME, BF, 128, 64) FH_FWD(NAME, BF, 128, 128)
FH_ALL(bf16, true)
FH_ALL(f16, false)
