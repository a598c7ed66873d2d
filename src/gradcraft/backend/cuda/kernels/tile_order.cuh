// The order in which a flash-attention launch's tiles start (flash.cuh's QueryTile and KeyTile).
//
// Block (or persistent work item) `index` of a launch of `tiles` tiles a row and `rows` rows (the heads
// of a batch) gets the tile of rank `rank` (0: the one with the most work) of row `row`. Blocks start
// in the order of their linear index, and causal attention's tiles differ in work by up to the
// sequence over the tile; taken row by row (the grid as it stands), the last rows' longest tiles start
// last and run on alone: a tail of 6-14% of the launch in a simulation of our grids, 28% with
// grouped-query attention's longer rows. Here the rows go in sections, each section taking its rows'
// longest tiles first, then the next longest and so on (longest processing time first), so that a
// launch ends on short tiles. Only for rows of FLASH_ORDER_MIN_TILES tiles or more: with fewer (short
// sequences) the tiles' work differs little, and taking a row's tiles together, as the grid stands,
// measured faster (on an H100: at T 512, head dim 64, 512 rows of 8 query tiles forward
// and 4 key tiles backward, sections of 192 rows made the backward 24% slower and the forward 13%,
// a row's streamed tensor no longer staying in L2 between its tiles; from 16 tiles a row on, it was level or faster, up to 10% at T 8192 and 6% with
// grouped-query attention). A section holds as many rows as keep their working set (row_kb a row, in
// KB: the keys and values its query tiles read, or the queries and output gradients its key tiles read)
// within FLASH_SECTION_KB, so that it stays in L2 as one row's did, but at least enough rows for two
// blocks an SM (sms), or the sections' own ends would be tails. (sms comes from %nsmid, which PTX
// lets exceed the SMs present; it only sets the smallest section, so too high a count makes sections
// longer, never an order that misses or repeats a tile.) (32-bit arithmetic only: 64-bit
// divisions cost registers, and some of the kernels are capped.)
//
// tests/test_tile_order.py runs it on the CPU.
#pragma once

#define FLASH_SECTION_KB (24 << 10)
#define FLASH_ORDER_MIN_TILES 16

struct TileOrder {
    int rank, row;
};

__device__ __forceinline__ TileOrder tile_order(int index, int tiles, int rows, int row_kb, int sms) {
    if (tiles < FLASH_ORDER_MIN_TILES) {  // row by row, without the sections' arithmetic
        const int row = index / tiles;
        return {index - row * tiles, row};
    }
    int section = FLASH_SECTION_KB / (row_kb > 0 ? row_kb : 1);
    section = section < 1 ? 1 : (section > rows ? rows : section);
    const int enough = (2 * sms + tiles - 1) / tiles;  // rows for two blocks an SM
    if (section < enough) section = enough < rows ? enough : rows;
    const int per = section * tiles, s = index / per, first = s * section;
    const int n = rows - first < section ? rows - first : section;  // (the last section may be short)
    const int within = index - s * per, rank = within / n;
    return {rank, first + within - rank * n};
}
