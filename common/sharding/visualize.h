// Text rendering of a sharding, like jax.debug.visualize_array_sharding
// without colour (jax/_src/debugging.py visualize_sharding).
//
// Rank 1 or 2 only. One tile per distinct shard, labelled "<platform> <ids>"
// where ids are the sorted devices holding that shard ("CPU 0,1,2,3"). 2-D:
// rows are shards along dim 0, columns shards along dim 1; 1-D: one row. Tiles
// are drawn with box-drawing lines (┌─┬─┐ ├─┼─┤ └─┴─┘), each at least as wide as
// its label plus padding and scaled to its chunk's share of the dim.
//
//   P('x', None) on (x=2, y=2), shape (8, 8):
//   ┌───────────────────────┐
//   │                       │
//   │        CPU 0,1        │
//   │                       │
//   │                       │
//   ├───────────────────────┤
//   │                       │
//   │        CPU 2,3        │
//   │                       │
//   │                       │
//   └───────────────────────┘
#ifndef MESHSERVE_COMMON_SHARDING_VISUALIZE_H_
#define MESHSERVE_COMMON_SHARDING_VISUALIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/sharding/named_sharding.h"

namespace meshserve {

// \error kInvalidArgument "`visualize_sharding` only works for shapes with 1
// and 2 dimensions. Got shape (...)".
absl::StatusOr<std::string> VisualizeSharding(absl::Span<const int64_t> shape,
                                              const NamedSharding& sharding,
                                              absl::string_view platform = "CPU");

// The keyword arguments of jax.debug.visualize_sharding (no colour).
struct VisualizeOptions {
  std::string platform = "CPU";
  double scale = 1.0;  // base tile height is int(10 * scale) lines
  int min_width = 9;   // tile widths are clamped to [min_width, max_width]
  int max_width = 80;
};

// As above with options. Sizing follows jax/_src/debugging.py: with
// base_height = int(10 * scale), base_width = int(base_height * d1 / d0) (d1 = 1
// for rank 1), a tile of extent (h, w) is int(h / d0 * base_height) lines high
// (1 for rank 1) and int(w / d1 * base_width * 2.5) columns wide, clamped to
// [min_width, max_width]; the label is centred. Columns take the widest tile of
// the column, rows the tallest tile of the row (shorter tiles are padded below).
// Unlike rich, the table is never squeezed to a console width. The text ends
// with a newline. Also \error kInvalidArgument for a rank mismatch with the
// sharding, a negative or zero dimension, or bad options.
absl::StatusOr<std::string> VisualizeSharding(absl::Span<const int64_t> shape,
                                              const NamedSharding& sharding,
                                              const VisualizeOptions& options);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_VISUALIZE_H_
