#include "common/sharding/repr.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace meshserve {
namespace {

std::string TupleOf(const std::vector<std::string>& items) {
  if (items.size() == 1) return absl::StrCat("(", items[0], ",)");
  return absl::StrCat("(", absl::StrJoin(items, ", "), ")");
}

std::vector<std::string> Quoted(absl::Span<const std::string> names) {
  std::vector<std::string> out;
  out.reserve(names.size());
  for (const std::string& n : names) out.push_back(absl::StrCat("'", n, "'"));
  return out;
}

}  // namespace

std::string PyTupleRepr(absl::Span<const int64_t> values) {
  std::vector<std::string> items;
  items.reserve(values.size());
  for (int64_t v : values) items.push_back(absl::StrCat(v));
  return TupleOf(items);
}

std::string PyTupleRepr(absl::Span<const std::string> names) {
  return TupleOf(Quoted(names));
}

std::string EntryRepr(const PartitionSpec::Entry& entry) {
  if (entry.empty()) return "None";
  if (entry.size() == 1) return absl::StrCat("'", entry[0], "'");
  return PyTupleRepr(entry);
}

std::string EntriesTupleRepr(absl::Span<const PartitionSpec::Entry> entries) {
  std::vector<std::string> items;
  items.reserve(entries.size());
  for (const PartitionSpec::Entry& e : entries) items.push_back(EntryRepr(e));
  return TupleOf(items);
}

std::string AxisSetRepr(absl::Span<const std::string> axes) {
  if (axes.size() == 1) return axes[0];
  return absl::StrCat("(", absl::StrJoin(axes, ","), ")");
}

std::string MeshAxisNamesRepr(const Mesh& mesh) {
  std::vector<std::string> names;
  for (const MeshAxis& a : mesh.axes()) names.push_back(a.name);
  return PyTupleRepr(names);
}

std::vector<std::string> InMeshOrder(const Mesh& mesh, std::vector<std::string> axes) {
  auto key = [&mesh](const std::string& name) {
    return mesh.AxisIndex(name).value_or(mesh.num_axes());
  };
  std::sort(axes.begin(), axes.end(), [&](const std::string& a, const std::string& b) {
    const int ka = key(a), kb = key(b);
    return ka != kb ? ka < kb : a < b;
  });
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

}  // namespace meshserve
