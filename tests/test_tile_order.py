"""kernels/tile_order.cuh (which tile each flash-attention block takes) run on the CPU: the very header,
compiled as C++, over many launch shapes. Every (tile, row) must be taken exactly once; within a
section of rows the tiles must go longest first (rank never decreasing); a section must keep to the
size budget unless that would leave it fewer than two blocks an SM; and a grid of one row must stay
in tile order, and so must rows of fewer than 16 tiles (what the kernels did before)."""

import shutil
import subprocess

import pytest

from gradcraft.backend.cuda import compiler

HARNESS = r"""
#include <cstdint>
#include <cstdio>
#include <vector>

#define __device__
#define __forceinline__ inline
#include "tile_order.cuh"

static int check(int tiles, int rows, int row_kb, int sms) {
    std::vector<int> seen((size_t)tiles * rows, 0);
    int bad = 0, last_rank = -1, last_section_first = -1;
    const long long total = (long long)tiles * rows;
    for (int index = 0; index < total; ++index) {
        const TileOrder at = tile_order(index, tiles, rows, row_kb, sms);
        if (at.rank < 0 || at.rank >= tiles || at.row < 0 || at.row >= rows) { ++bad; continue; }
        ++seen[(size_t)at.row * tiles + at.rank];
        // the section this index falls in: ranks never go down inside it
        const int by_size = FLASH_SECTION_KB / row_kb;
        int section = by_size < 1 ? 1 : (by_size > rows ? rows : by_size);
        const int enough = (2 * sms + tiles - 1) / tiles;
        if (section < enough) section = enough < rows ? enough : rows;
        if (tiles < FLASH_ORDER_MIN_TILES) section = 1;
        const int first = index / (section * tiles) * section;
        if (first != last_section_first) last_section_first = first, last_rank = -1;
        if (at.rank < last_rank) ++bad;
        last_rank = at.rank;
        if (at.row < first || at.row >= first + section) ++bad;  // rows stay in their section
    }
    for (int v : seen) bad += v != 1;
    // one row, or rows of few tiles: row by row, the tiles in order, as the kernels took them before
    if (rows == 1 || tiles < FLASH_ORDER_MIN_TILES)
        for (int index = 0; index < total; ++index) {
            const TileOrder at = tile_order(index, tiles, rows, row_kb, sms);
            bad += at.rank != index % tiles || at.row != index / tiles;
        }
    return bad;
}

int main() {
    int failed = 0, cases = 0;
    const int tiles_list[] = {1, 2, 3, 4, 8, 13, 32, 64, 128};
    const int rows_list[] = {1, 2, 5, 16, 17, 64, 256, 511};
    const int kb_list[] = {1, 4, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 1 << 30};
    const int sms_list[] = {1, 132, 144};
    for (int tiles : tiles_list)
        for (int rows : rows_list)
            for (int kb : kb_list)
                for (int sms : sms_list) {
                    const int bad = check(tiles, rows, kb, sms);
                    ++cases;
                    if (bad) {
                        std::printf("tiles %d rows %d row_kb %d sms %d: %d wrong\n", tiles, rows, kb, sms, bad);
                        ++failed;
                    }
                }
    // the sections of a long-sequence grid: 16 rows of 4 MB at 24 MB a section, 64 tiles (6 rows)
    const TileOrder a = tile_order(5, 64, 16, 4 << 10, 132), b = tile_order(6, 64, 16, 4 << 10, 132);
    if (!(a.rank == 0 && a.row == 5 && b.rank == 1 && b.row == 0)) ++failed, std::printf("sections of 6 rows\n");
    std::printf("%d cases, %d failed\n", cases, failed);
    return failed != 0;
}
"""


def _cxx():
    return next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)


@pytest.mark.skipif(_cxx() is None, reason="no C++ compiler")
def test_tile_order_takes_every_tile_once_longest_first_by_sections(tmp_path):
    source = tmp_path / "harness.cpp"
    source.write_text(HARNESS)
    binary = tmp_path / "harness"
    build = subprocess.run(
        [_cxx(), "-std=c++17", "-O1", f"-I{compiler.KERNEL_DIR}", str(source), "-o", str(binary)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    result = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("0 failed")
