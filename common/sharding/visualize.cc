#include "common/sharding/visualize.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_util.h"
#include "common/sharding/repr.h"
#include "common/sharding/shard_layout.h"

namespace meshserve {
namespace {

struct Tile {
  std::vector<int64_t> devices;  // ascending
  std::string label;
  int height = 1;  // lines
  int left = 0, right = 0, top = 0, bottom = 0;
  int content_width() const {
    return left + static_cast<int>(label.size()) + right;
  }
  int content_height() const { return top + 1 + bottom; }
};

std::string Repeat(absl::string_view s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out.append(s.data(), s.size());
  return out;
}

std::string Rule(const std::vector<int>& widths, absl::string_view left,
                 absl::string_view mid, absl::string_view right) {
  std::string out(left);
  for (size_t j = 0; j < widths.size(); ++j) {
    if (j > 0) out.append(mid.data(), mid.size());
    out += Repeat("─", widths[j]);
  }
  out.append(right.data(), right.size());
  out += "\n";
  return out;
}

// Line `line` of `tile` rendered in a cell of `width` columns.
std::string CellLine(const Tile& tile, int width, int line) {
  if (line != tile.top) return std::string(width, ' ');
  const int inner = width - tile.left - tile.right;
  const int excess = std::max(0, inner - static_cast<int>(tile.label.size()));
  return absl::StrCat(std::string(tile.left + excess / 2, ' '), tile.label,
                      std::string(tile.right + excess - excess / 2, ' '));
}

absl::Status ValidateInput(absl::Span<const int64_t> shape,
                           const NamedSharding& sharding,
                           const VisualizeOptions& options) {
  const int rank = static_cast<int>(shape.size());
  if (rank < 1 || rank > 2) {
    return InvalidArgument(
        "`visualize_sharding` only works for shapes with 1 and 2 dimensions. "
        "Got shape ", PyTupleRepr(shape));
  }
  if (rank != sharding.rank()) {
    return InvalidArgument("shape ", PyTupleRepr(shape), " does not match the rank ",
                           sharding.rank(), " of ", sharding.ToString());
  }
  for (int64_t d : shape) {
    if (d <= 0) {
      return InvalidArgument("cannot visualize shape ", PyTupleRepr(shape),
                             ": dimensions must be positive");
    }
  }
  constexpr int64_t kMaxDevices = int64_t{1} << 16;
  if (sharding.mesh().num_devices() > kMaxDevices) {
    return InvalidArgument("cannot visualize ", sharding.mesh().ToString(), ": ",
                           sharding.mesh().num_devices(), " devices (limit ",
                           kMaxDevices, ")");
  }
  if (!(options.scale > 0 && options.scale <= 100) || options.min_width < 0 ||
      options.max_width < options.min_width || options.max_width > 100000) {
    return InvalidArgument("bad visualize options: scale=", options.scale,
                           " min_width=", options.min_width,
                           " max_width=", options.max_width);
  }
  return absl::OkStatus();
}

// Python's divmod(a, 2) quotient (floors for negative a).
int FloorHalf(int a) { return a >= 0 ? a / 2 : (a - 1) / 2; }

// Sets the paddings of `tile` for a target `width` x `height`, as JAX does:
// centred label, negative paddings clamped to 0.
void PadTile(int width, int height, Tile* tile) {
  const int h_slack = width - static_cast<int>(tile->label.size()) - 2;
  const int left = FloorHalf(h_slack);
  const int v_slack = height - 2;
  const int top = FloorHalf(v_slack);
  tile->left = std::max(left, 0);
  tile->right = std::max(h_slack - left, 0);  // left + remainder
  tile->top = std::max(top, 0);
  tile->bottom = std::max(v_slack - top, 0);
}

// One tile per (row, col) shard, in row-major order, labelled and padded.
std::vector<Tile> BuildTiles(absl::Span<const int64_t> shape,
                             const NamedSharding& sharding,
                             const VisualizeOptions& options, int64_t num_cols) {
  const int rank = static_cast<int>(shape.size());
  const int64_t num_rows = rank == 2 ? sharding.NumShardsAlongDim(0) : 1;
  const int base_height = static_cast<int>(10 * options.scale);
  const double aspect =
      static_cast<double>(rank == 2 ? shape[1] : 1) / static_cast<double>(shape[0]);
  const auto base_width = static_cast<int64_t>(base_height * aspect);

  std::vector<Tile> tiles(num_rows * num_cols);
  std::vector<Box> extents(tiles.size());
  const std::vector<Box> boxes = ShardBoxesByDevice(shape, sharding);
  for (int64_t device = 0; device < sharding.mesh().num_devices(); ++device) {
    const int64_t row = rank == 2 ? ShardIndexAlongDim(sharding, device, 0) : 0;
    const int64_t col = ShardIndexAlongDim(sharding, device, rank - 1);
    tiles[row * num_cols + col].devices.push_back(device);
    extents[row * num_cols + col] = boxes[device];
  }
  for (size_t t = 0; t < tiles.size(); ++t) {
    Tile& tile = tiles[t];
    const Box& box = extents[t];
    tile.label = absl::StrCat(options.platform, " ", absl::StrJoin(tile.devices, ","));
    const double width_fraction = static_cast<double>(box[rank - 1].size()) /
                                  static_cast<double>(shape[rank - 1]);
    double width = width_fraction * static_cast<double>(base_width) * 2.5;
    width = std::min<double>(std::max<double>(width, options.min_width),
                             options.max_width);
    int height = 1;
    if (rank == 2) {
      height = static_cast<int>(static_cast<double>(box[0].size()) /
                                static_cast<double>(shape[0]) * base_height);
    }
    PadTile(static_cast<int>(width), height, &tile);
  }
  return tiles;
}

// Columns take their widest tile, rows their tallest.
std::string Render(const std::vector<Tile>& tiles, int64_t num_rows,
                   int64_t num_cols) {
  std::vector<int> col_widths(num_cols, 0);
  std::vector<int> row_heights(num_rows, 0);
  for (int64_t i = 0; i < num_rows; ++i) {
    for (int64_t j = 0; j < num_cols; ++j) {
      const Tile& tile = tiles[i * num_cols + j];
      col_widths[j] = std::max(col_widths[j], tile.content_width());
      row_heights[i] = std::max(row_heights[i], tile.content_height());
    }
  }
  std::string out = Rule(col_widths, "┌", "┬", "┐");
  for (int64_t i = 0; i < num_rows; ++i) {
    if (i > 0) out += Rule(col_widths, "├", "┼", "┤");
    for (int line = 0; line < row_heights[i]; ++line) {
      out += "│";
      for (int64_t j = 0; j < num_cols; ++j) {
        if (j > 0) out += "│";
        out += CellLine(tiles[i * num_cols + j], col_widths[j], line);
      }
      out += "│\n";
    }
  }
  out += Rule(col_widths, "└", "┴", "┘");
  return out;
}

}  // namespace

absl::StatusOr<std::string> VisualizeSharding(absl::Span<const int64_t> shape,
                                              const NamedSharding& sharding,
                                              absl::string_view platform) {
  VisualizeOptions options;
  options.platform = std::string(platform);
  return VisualizeSharding(shape, sharding, options);
}

absl::StatusOr<std::string> VisualizeSharding(absl::Span<const int64_t> shape,
                                              const NamedSharding& sharding,
                                              const VisualizeOptions& options) {
  absl::Status valid = ValidateInput(shape, sharding, options);
  if (!valid.ok()) return valid;
  const int rank = static_cast<int>(shape.size());
  const int64_t num_rows = rank == 2 ? sharding.NumShardsAlongDim(0) : 1;
  const int64_t num_cols = sharding.NumShardsAlongDim(rank - 1);
  std::vector<Tile> tiles = BuildTiles(shape, sharding, options, num_cols);
  return Render(tiles, num_rows, num_cols);
}

}  // namespace meshserve
