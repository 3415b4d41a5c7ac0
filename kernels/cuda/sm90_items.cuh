// The Hopper prefill kernel's work items (flash_prefill_sm90.cu): a launch's (query tile, head)
// pairs, the order blocks take them in, the counter through which persistent blocks claim them and
// the hand-over of each from a block's scheduler to its consumers, and what an item's query tile
// sees of its sequence. Included after hopper.cuh (its mbarriers), for sm_90a builds only.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The order in which blocks take (query tile, head), longest tiles first either way. Launches of at
// most this many query tiles a head (8,192 tokens and a few sequences) go tile by tile, all heads of
// a tile together: every head's longest tiles then start in the first wave and the short ones fill
// the last (1.15-1.4x at 1K-2K tokens, 1.03-1.07x at 8K). Longer launches go head by head, which
// keeps one KV head's keys in L2 for the blocks running together (tile by tile was 6-7 % slower at
// 64K tokens, head_dim 64). BENCHMARKS.md, "Kernel lab". Counted in query rows a head (72 tiles of
// 128). 0: head by head everywhere.
#ifndef SM90_HEADS_FIRST_ROWS
#define SM90_HEADS_FIRST_ROWS 9216
#endif

// The launch's work items are its (query tile, head) pairs, `total` of them, in the order blocks
// take them: block b starts with item b, and the items past the first wave go to whichever block is
// done first, in launch order, through this counter (claimed by one thread a block). The last block to
// stop claiming sets it back to zero for the next launch: a backend launches on its one stream, so
// its launches never overlap, and each backend loads the module, and so the counter, for itself.
__device__ unsigned sm90_next_item = 0, sm90_blocks_done = 0;

// The block's next item after its first (`total` once there are none left).
__device__ __forceinline__ int claim_item(int total) {
    if ((int)gridDim.x >= total) {
        return total;  // one wave: nothing to claim, nothing to reset
    }
    const int index = (int)gridDim.x + (int)atomicAdd(&sm90_next_item, 1u);
    if (index < total) {
        return index;
    }
    __threadfence();
    if (atomicAdd(&sm90_blocks_done, 1u) == gridDim.x - 1) {
        sm90_next_item = 0;  // every block has stopped claiming
        sm90_blocks_done = 0;
    }
    return total;
}

// One work item: query tile `tile` (of BM rows) of sequence `s`, head `h`.
struct Item {
    int s, tile, h;
};

// Item `index` of a launch of `query_tiles` tiles a head (num_tokens / BM + num_seqs: surplus ones
// are not items, and false is returned). Launches of at most SM90_HEADS_FIRST_ROWS rows a head go
// tile by tile, the longer ones head by head; either way the longest (last) query tiles come first.
template <int BM>
__device__ __forceinline__ bool item_at(int index, int query_tiles, int num_heads,
                                        const unsigned* query_start_loc, int num_seqs, Item* it) {
    int h = index / query_tiles, x = index % query_tiles;
    if (query_tiles * BM <= SM90_HEADS_FIRST_ROWS) {
        h = index % num_heads;
        x = index / num_heads;
    }
    it->h = h;
    return find_query_tile<BM>(query_start_loc, num_seqs, query_tiles - 1 - x, &it->s, &it->tile);
}

// The launch's shape, as the entry points receive it.
struct Batch {
    const unsigned *query_start_loc, *seq_lens, *block_table;
    int num_seqs, num_heads, num_kv_heads, block_size, max_blocks_per_seq, query_tiles;
};

// The scheduler of a persistent block (one thread): claims the block's k-th item (`total` once none
// is left) and hands it to its readers through slot k % 2, once they have all read what that slot
// held before.
template <class Lay>
__device__ __forceinline__ void schedule(const Lay& L, int total, int k) {
    const int index = k == 0 ? (int)blockIdx.x : claim_item(total);
    const unsigned slot = k & 1;
    if (k >= 2) {
        mbar_wait(L.item_empty() + 8 * slot, ((k >> 1) - 1) & 1);
    }
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(L.item_slot() + 4 * slot), "r"(index) : "memory");
    mbar_arrive(L.item_full() + 8 * slot);
}

// The block's k-th item as the scheduler handed it over, once it has (a consumer thread; its read
// counts towards the slot's reuse).
template <class Lay>
__device__ __forceinline__ int read_item(const Lay& L, int k) {
    const unsigned slot = k & 1;
    mbar_wait(L.item_full() + 8 * slot, (k >> 1) & 1);
    int index;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(index) : "r"(L.item_slot() + 4 * slot) : "memory");
    mbar_arrive(L.item_empty() + 8 * slot);
    return index;
}

// Waits until the ring stage that the block's next item's first tile goes to is free (ring tile
// `ring` - ST handed back): the moment a block claims its next item. Claimed earlier, an item waits
// in a block that cannot start it yet while other blocks run out of work at the end of the launch
// (0.89x at 1K tokens, head_dim 64, with claims as soon as the previous item's loads were issued).
template <class Lay>
__device__ __forceinline__ void wait_for_free_stage(const Lay& L, int ring) {
    if (ring >= (int)Lay::ST) {
        mbar_wait(L.empty() + 8 * (ring % Lay::ST), (ring / Lay::ST - 1) & 1);
    }
}

// What a sequence's query tile sees: its first query row's position after the cached prefix, the
// keys visible to some row of it (`end`) and the key tiles holding them.
struct Span {
    int q0, q_len, prefix, m0, end, tiles;
};

template <int BM, int BN>
__device__ __forceinline__ Span span_of(const Item& it, const unsigned* query_start_loc,
                                        const unsigned* seq_lens) {
    Span sp;
    sp.q0 = (int)query_start_loc[it.s];
    sp.q_len = (int)query_start_loc[it.s + 1] - sp.q0;
    const int ctx = (int)seq_lens[it.s];
    sp.prefix = ctx - sp.q_len;
    sp.m0 = it.tile * BM;
    sp.end = min(ctx, sp.prefix + sp.m0 + BM);
    sp.tiles = (sp.end + BN - 1) / BN;
    return sp;
}

// Item `index` (below the batch's item count) of the batch and its span; false for a surplus item.
template <int BM, int BN>
__device__ __forceinline__ bool item_and_span(int index, const Batch& b, Item* it, Span* sp) {
    if (!item_at<BM>(index, b.query_tiles, b.num_heads, b.query_start_loc, b.num_seqs, it)) {
        return false;
    }
    *sp = span_of<BM, BN>(*it, b.query_start_loc, b.seq_lens);
    return true;
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL
