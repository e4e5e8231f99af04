// Walks over the elements of a region shared by two row-major buffers
// (compare, copy) that touch only that region, for staging overlapping puts
// (the part of a box other boxes leave uncovered is common/sharding/box.h's
// Uncovered).
//
// A buffer "of box b" holds b's elements row-major, `elem` bytes each (the
// layout of Tensor and of a staged chunk). The region walk moves one
// contiguous run at a time: the innermost dims that the region spans fully in
// both boxes are merged into one run, so full rows are one memcmp/memcpy.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_SERVER_WORKER_PARAMS_BOX_OVERLAP_H_
#define MESHSERVE_SERVER_WORKER_PARAMS_BOX_OVERLAP_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/sharding/box.h"

namespace meshserve {

// The global index of the first element (row-major over `region`) whose
// bytes differ between `a` (a buffer of a_box) and `b` (a buffer of b_box),
// or nullopt when the region is byte-identical. Precondition: `region` lies
// in both boxes.
std::optional<std::vector<int64_t>> FirstDifference(const char* a, const Box& a_box,
                                                    const char* b, const Box& b_box,
                                                    const Box& region, int64_t elem);

// The same for a byte range of a put in progress: `bytes` are bytes
// [offset, offset + bytes.size()) of a buffer of `box` (a range may split
// elements); compared with `buffer`, a buffer of buffer_box, which contains
// `box`. The global index of the element holding the first differing byte,
// or nullopt.
std::optional<std::vector<int64_t>> FirstDifferenceInRange(absl::string_view bytes,
                                                           int64_t offset, const Box& box,
                                                           const char* buffer,
                                                           const Box& buffer_box, int64_t elem);

// dst[region] = src[region]: `src` a buffer of src_box, `dst` of dst_box.
// Precondition: `region` lies in both boxes.
void CopyRegion(const char* src, const Box& src_box, char* dst, const Box& dst_box,
                const Box& region, int64_t elem);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_PARAMS_BOX_OVERLAP_H_
