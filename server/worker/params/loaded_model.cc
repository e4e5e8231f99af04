#include "server/worker/params/loaded_model.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace meshserve {

std::string LoadedModel::DevicesString() const {
  return absl::StrCat("[", absl::StrJoin(devices, ", "), "]");
}

std::string LoadedModel::Name() const {
  return absl::StrCat("model '", model, "' generation ", generation, " version ", version);
}

int HeldParam::CellContaining(const Box& box) const {
  for (size_t i = 0; i < cells.size(); ++i) {
    if (cells[i]->box.rank() == box.rank() && cells[i]->box.Contains(box)) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

std::string HeldParam::CellsString() const {
  std::vector<std::string> boxes;
  for (const auto& cell : cells) boxes.push_back(cell->box.ToString());
  return absl::StrJoin(boxes, ", ");
}

int64_t DistinctHeldBytes(const LoadedModel& model) {
  absl::flat_hash_set<const BoxTensor*> seen;
  int64_t bytes = 0;
  for (const auto& [name, held] : model.held) {
    for (const auto& cell : held.cells) {
      if (seen.insert(cell.get()).second) bytes += cell->tensor.NumBytes();
    }
  }
  return bytes;
}

}  // namespace meshserve
