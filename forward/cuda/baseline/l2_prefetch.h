// The L2 prefetch plan of a dense decode step (knobs l2_prefetch_mb, l2_prefetch_idle_mb; the
// device side is in gemv.cuh): the step's weights as one stream in the order the decode GEMVs read
// them (per layer q, k, v; o; gate and up side by side; down; then the lm_head), and a cursor.
// Each launch of the step asks for the part of the stream between its front (a GEMV: the end of
// its own weights, which it streams itself; the head and attention kernels: the start of the next
// GEMV's) and `lookahead` bytes past it that no earlier launch asked for, and issues it as L2
// prefetches before it waits for the previous kernel. So the prefetch front runs a bounded distance
// ahead of the weights in use, and no weight byte is asked for twice in a step. Host code; the
// pointers are the plugin's bf16 matrices, fixed from create() on, so a captured graph keeps valid
// ranges.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gemv.cuh"

namespace hp_cuda_baseline {

class WeightStream {
public:
    // Appends `bytes` of the weight at `ptr` to the stream; with `ptr2` (gate and up), two weights of
    // `bytes` each read side by side: stream offset x of this piece is byte x / 2 of both.
    void add(const void *ptr, uint64_t bytes, const void *ptr2 = nullptr) {
        pieces_.push_back({static_cast<const char *>(ptr), static_cast<const char *>(ptr2), bytes, total_});
        total_ += ptr2 ? 2 * bytes : bytes;
    }
    uint64_t size() const { return total_; }

    void restart() { cursor_ = 0; }

    // The not yet prefetched part of [front, front + lookahead), as at most kMaxRanges ranges (a
    // window that needs more stops early; the next launch continues from there).
    hp_cuda_gemv::L2Prefetch next(uint64_t front, uint64_t lookahead) {
        hp_cuda_gemv::L2Prefetch out;
        cursor_ = std::max(cursor_, front);
        const uint64_t end = std::min(total_, front + lookahead);
        int n = 0;
        for (const Piece &piece : pieces_) {
            const uint64_t length = piece.ptr2 ? 2 * piece.bytes : piece.bytes;
            if (cursor_ >= end) break;
            if (piece.at + length <= cursor_) continue;
            const uint64_t from = cursor_ - piece.at, to = std::min(length, end - piece.at);
            const int needed = piece.ptr2 ? 2 : 1;
            if (n + needed > hp_cuda_gemv::L2Prefetch::kMaxRanges) break;
            const uint64_t begin = piece.ptr2 ? from / 2 : from, stop = piece.ptr2 ? to / 2 : to;
            n = append(out, n, piece.ptr + begin, stop - begin);
            if (piece.ptr2) n = append(out, n, piece.ptr2 + begin, stop - begin);
            cursor_ = piece.at + to;
        }
        return out;
    }

private:
    struct Piece {
        const char *ptr, *ptr2;
        uint64_t bytes, at;  // at: offset of the piece in the stream
    };
    // Adds [ptr, ptr + bytes), merged with the last range when contiguous; ranges stay under 4 GB.
    static int append(hp_cuda_gemv::L2Prefetch &out, int n, const char *ptr, uint64_t bytes) {
        bytes = std::min<uint64_t>(bytes, uint32_t(-1) & ~uint32_t(15));
        if (bytes == 0) return n;
        if (n > 0 && static_cast<const char *>(out.ptr[n - 1]) + out.bytes[n - 1] == ptr && uint64_t(out.bytes[n - 1]) + bytes < (uint64_t(1) << 32)) {
            out.bytes[n - 1] += uint32_t(bytes);
            return n;
        }
        out.ptr[n] = ptr;
        out.bytes[n] = uint32_t(bytes);
        return n + 1;
    }

    std::vector<Piece> pieces_;
    uint64_t total_ = 0, cursor_ = 0;
};

}  // namespace hp_cuda_baseline
