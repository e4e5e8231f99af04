// Region walks for overlapping staged boxes (see the header).
//
// Thread-safety: pure functions.
#include "server/worker/params/box_overlap.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace meshserve {

namespace {

// Calls run(a_offset, b_offset, bytes, first_index) for each contiguous run of
// `region` in buffers of a_box and b_box, in row-major order; `first_index` is
// the global index of the run's first element. Stops when run returns false.
template <typename Run>
void WalkRegion(const Box& a_box, const Box& b_box, const Box& region, int64_t elem, Run run) {
  if (region.IsEmpty()) return;
  const int rank = region.rank();
  if (rank == 0) {
    run(0, 0, elem, std::vector<int64_t>());
    return;
  }
  std::vector<int64_t> a_stride(rank, 1), b_stride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) {
    a_stride[d] = a_stride[d + 1] * a_box[d + 1].size();
    b_stride[d] = b_stride[d + 1] * b_box[d + 1].size();
  }
  // Dims [merged, rank) form one run: every dim after `merged` is spanned
  // fully in both boxes.
  int merged = rank - 1;
  int64_t run_elements = region[rank - 1].size();
  while (merged > 0 && region[merged] == a_box[merged] && region[merged] == b_box[merged]) {
    --merged;
    run_elements *= region[merged].size();
  }
  std::vector<int64_t> index(rank);
  for (int d = 0; d < rank; ++d) index[d] = region[d].begin;
  while (true) {
    int64_t a_off = 0, b_off = 0;
    for (int d = 0; d < rank; ++d) {
      a_off += (index[d] - a_box[d].begin) * a_stride[d];
      b_off += (index[d] - b_box[d].begin) * b_stride[d];
    }
    if (!run(a_off * elem, b_off * elem, run_elements * elem, index)) return;
    int d = merged - 1;  // odometer over the dims before the run
    while (d >= 0 && ++index[d] == region[d].end) {
      index[d] = region[d].begin;
      --d;
    }
    if (d < 0) return;
  }
}

}  // namespace

std::optional<std::vector<int64_t>> FirstDifference(const char* a, const Box& a_box,
                                                    const char* b, const Box& b_box,
                                                    const Box& region, int64_t elem) {
  std::optional<std::vector<int64_t>> found;
  WalkRegion(a_box, b_box, region, elem,
             [&](int64_t a_off, int64_t b_off, int64_t bytes, const std::vector<int64_t>& first) {
               if (std::memcmp(a + a_off, b + b_off, bytes) == 0) return true;
               int64_t i = 0;
               while (a[a_off + i] == b[b_off + i]) ++i;
               // Unflatten the element offset within the run over the region's
               // innermost dims (the run starts at `first`, dims spanned fully
               // after the first merged one).
               int64_t k = i / elem;
               std::vector<int64_t> index = first;
               for (int d = region.rank() - 1; d >= 0 && k > 0; --d) {
                 const int64_t size = region[d].size();
                 const int64_t pos = index[d] - region[d].begin + k;
                 index[d] = region[d].begin + pos % size;
                 k = pos / size;
               }
               found = std::move(index);
               return false;
             });
  return found;
}

std::optional<std::vector<int64_t>> FirstDifferenceInRange(absl::string_view bytes,
                                                           int64_t offset, const Box& box,
                                                           const char* buffer,
                                                           const Box& buffer_box, int64_t elem) {
  const int rank = box.rank();
  // A row: the innermost dim of `box` (the one element of a rank-0 box).
  const int64_t row_bytes = (rank == 0 ? 1 : box[rank - 1].size()) * elem;
  if (row_bytes == 0) return std::nullopt;
  std::vector<int64_t> buffer_stride(rank, 1);
  for (int d = rank - 2; d >= 0; --d) {
    buffer_stride[d] = buffer_stride[d + 1] * buffer_box[d + 1].size();
  }
  std::vector<int64_t> index(rank);
  int64_t done = 0;
  const int64_t size = static_cast<int64_t>(bytes.size());
  while (done < size) {
    const int64_t p = offset + done;
    int64_t row = p / row_bytes;
    const int64_t within = p % row_bytes;
    // The row's first element in global coordinates, then its buffer offset.
    for (int d = rank - 1; d >= 0; --d) {
      if (d == rank - 1) {
        index[d] = box[d].begin;
        continue;
      }
      index[d] = box[d].begin + row % box[d].size();
      row /= box[d].size();
    }
    int64_t at = 0;
    for (int d = 0; d < rank; ++d) at += (index[d] - buffer_box[d].begin) * buffer_stride[d];
    const char* theirs = buffer + at * elem + within;
    const char* ours = bytes.data() + done;
    const int64_t n = std::min(row_bytes - within, size - done);
    if (std::memcmp(ours, theirs, n) != 0) {
      int64_t k = 0;
      while (ours[k] == theirs[k]) ++k;
      if (rank > 0) index[rank - 1] += (within + k) / elem;
      return index;
    }
    done += n;
  }
  return std::nullopt;
}

void CopyRegion(const char* src, const Box& src_box, char* dst, const Box& dst_box,
                const Box& region, int64_t elem) {
  WalkRegion(src_box, dst_box, region, elem,
             [&](int64_t src_off, int64_t dst_off, int64_t bytes, const std::vector<int64_t>&) {
               std::memcpy(dst + dst_off, src + src_off, bytes);
               return true;
             });
}

}  // namespace meshserve
