"""kernels/row_store.cuh (the flash-attention epilogues' 16-byte row stores) run on the CPU: the very
header, compiled as C++ with a warp of 32 threads whose __shfl_xor_sync meets at a barrier, writes rows
from the accumulator's layout; every element must land in its row and column, rows past the end must
stay untouched, and exactly the 16-byte-aligned pieces must go out as one 16-byte store. CI has no GPU:
this is what checks the shuffles' arithmetic there."""

import shutil
import subprocess

import pytest

from gradcraft.backend.cuda import compiler

HARNESS = r"""
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>
#include <atomic>

typedef uint16_t u16;
typedef uint32_t u32;
#define __device__
#define __forceinline__ inline
struct uint4 { u32 x, y, z, w; };
static std::atomic<int> wide_stores{0};
inline uint4 make_uint4(u32 x, u32 y, u32 z, u32 w) { ++wide_stores; return uint4{x, y, z, w}; }

// A warp: 32 threads; a shuffle posts every lane's value, waits for all, reads the partner's, waits again.
struct Barrier {
    std::mutex m; std::condition_variable cv; int count = 0, generation = 0;
    void wait() {
        std::unique_lock<std::mutex> lock(m);
        const int g = generation;
        if (++count == 32) { count = 0; ++generation; cv.notify_all(); }
        else cv.wait(lock, [&] { return generation != g; });
    }
};
static Barrier barrier;
static u32 posted[32];
static thread_local int lane_id;
u32 __shfl_xor_sync(unsigned mask, u32 v, int x) {
    if (mask != 0xffffffffu) std::abort();
    posted[lane_id] = v;
    barrier.wait();
    const u32 got = posted[lane_id ^ x];
    barrier.wait();
    return got;
}

#include "row_store.cuh"

static u16 value(int row, int col) { return (u16)(row * 512 + col + 1); }

// One warp writes rows 0..7 (lane / 4) of GROUPS * 8 columns at a row stride of `stride` elements from
// `offset` elements into the buffer; rows >= rows_valid are past the end.
template <int GROUPS> int run(int stride, int offset, int rows_valid) {
    const int cols = GROUPS * 8;
    std::vector<u16> buffer(offset + 8 * stride + 64, 0xdead);
    u16* base = buffer.data() + offset;
    wide_stores = 0;
    std::vector<std::thread> lanes;
    for (int lane = 0; lane < 32; ++lane)
        lanes.emplace_back([=] {
            lane_id = lane;
            const int row = lane / 4, tq = lane % 4;
            u32 pairs[GROUPS];
            for (int j = 0; j < GROUPS; ++j)  // the accumulator's layout: columns 8 j + 2 tq and the next
                pairs[j] = value(row, 8 * j + 2 * tq) | (u32)value(row, 8 * j + 2 * tq + 1) << 16;
            store_row_16b<GROUPS>(base + row * stride, pairs, tq, row < rows_valid);
        });
    for (auto& t : lanes) t.join();
    int wrong = 0, expected_wide = 0;
    for (int i = 0; i < (int)buffer.size(); ++i) {
        const int at = i - offset, row = at >= 0 ? at / stride : -1, col = at >= 0 ? at % stride : -1;
        const bool written = row >= 0 && row < 8 && row < rows_valid && col < cols;
        if (buffer[i] != (written ? value(row, col) : 0xdead)) ++wrong;
    }
    for (int row = 0; row < rows_valid && row < 8; ++row)
        for (int piece = 0; piece < GROUPS / 4 * 4; ++piece)  // (the last GROUPS % 4 groups: 4-byte stores)
            expected_wide += (reinterpret_cast<uintptr_t>(base + row * stride + 8 * piece) & 15) == 0;
    std::printf("groups %d stride %d offset %d rows %d: %d wrong, %d of %d pieces in 16-byte stores\n", GROUPS,
                stride, offset, rows_valid, wrong, (int)wide_stores, expected_wide);
    return wrong != 0 || wide_stores != expected_wide;
}

int main() {
    int failed = 0;
    // aligned rows; rows past the end; every other row misaligned (a stride of 4 bytes past 16); a
    // misaligned start
    // (groups: head dims 32, 48, 64, 96, 128 over 8)
    for (int rows : {8, 5, 0}) {
        failed += run<8>(64, 0, rows) + run<16>(128, 0, rows) + run<4>(32, 0, rows) + run<12>(96, 0, rows);
        failed += run<8>(66, 0, rows) + run<16>(132, 0, rows) + run<6>(48, 0, rows) + run<6>(50, 0, rows);
        failed += run<8>(64, 2, rows) + run<16>(1024, 6, rows) + run<12>(98, 2, rows);
    }
    std::printf(failed ? "FAILED\n" : "all rows right\n");
    return failed != 0;
}
"""


def _cxx():
    return next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)


@pytest.mark.skipif(_cxx() is None, reason="no C++ compiler")
def test_row_store_puts_every_element_in_its_place_and_uses_16_byte_stores_where_aligned(tmp_path):
    source = tmp_path / "harness.cpp"
    source.write_text(HARNESS)
    binary = tmp_path / "harness"
    build = subprocess.run(
        [_cxx(), "-std=c++17", "-O1", "-pthread", "-Wno-unknown-pragmas", f"-I{compiler.KERNEL_DIR}", str(source),
         "-o", str(binary)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    result = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all rows right" in result.stdout
    assert " 0 wrong, 0 of 0 pieces" not in result.stdout.splitlines()[0]  # (the first case writes rows)
