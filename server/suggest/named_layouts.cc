// The hand-written baselines of `meshserve suggest` (NamedLayouts in
// layout_space.h): replicated, data parallel, FSDP, Megatron column-then-row
// and row-then-column, and the file's own layout where the search's options
// can express it.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "server/suggest/layout_space.h"

namespace meshserve {
namespace {

bool SameOption(const RoleOption& a, const RoleOption& b) {
  return a.kind == b.kind && a.dims == b.dims;
}

// Index of `want` among `role`'s options; 0 when it has none such.
int OptionIndex(const Role& role, const RoleOption& want) {
  for (size_t i = 0; i < role.options.size(); ++i) {
    if (SameOption(role.options[i], want)) return static_cast<int>(i);
  }
  return 0;
}

class Builder {
 public:
  Builder(const LayoutSpace& space) : space_(space), layout_(space.roles.size(), 0) {
    for (size_t r = 0; r < space.roles.size(); ++r) {
      for (const std::string& m : space.roles[r].members) role_of_[m] = static_cast<int>(r);
    }
  }
  // Every param role's option by its members' rank: fn(rank) -> dims.
  template <typename Fn>
  void AllParams(Fn fn) {
    for (size_t r = 0; r < space_.roles.size(); ++r) {
      const Role& role = space_.roles[r];
      if (role.kind != Role::kParam) continue;
      Set(r, {RoleOption::kSpec, fn(static_cast<int>(role.options[0].dims.size()))});
    }
  }
  void AllOuts(RoleOption::Kind kind) {
    for (size_t r = 0; r < space_.roles.size(); ++r) {
      if (space_.roles[r].kind == Role::kOut) Set(r, {kind, {}});
    }
  }
  void Inputs(RoleOption::Kind kind) { Set(0, {kind, {}}); }
  // The role of `member` (a param or layer name) takes `option`.
  void SetMember(const std::string& member, const RoleOption& option) {
    auto it = role_of_.find(member);
    if (it != role_of_.end()) Set(it->second, option);
  }
  // Whether the file gives `layer` an out_sharding (some ops require one).
  bool FileHasOut(const std::string& layer) const {
    auto it = role_of_.find(layer);
    return it != role_of_.end() && space_.roles[it->second].options[0].kind == RoleOption::kFile;
  }
  const Layout& layout() const { return layout_; }

 private:
  void Set(size_t r, const RoleOption& option) {
    layout_[r] = OptionIndex(space_.roles[r], option);
  }
  const LayoutSpace& space_;
  Layout layout_;
  std::map<std::string, int> role_of_;
};

std::vector<AxisRole> Dims(int rank, int dim, AxisRole a) {
  std::vector<AxisRole> dims(rank, AxisRole::kNone);
  if (dim >= 0 && dim < rank) dims[dim] = a;
  return dims;
}

// A dot layer's param kernel of rank 2 and which of its dims is contracted
// (the other is free): linear [in, out] -> (kernel, 0); einsum
// "bsi,oi->bso" with a param second operand -> (that param, 1).
bool KernelDims(const ModelFile& model, const LayerDef& l, std::string& kernel,
                int& contracted) {
  if (l.kind == ModelOp::kLinear) {
    kernel = l.kernel;
    contracted = 0;
    return true;
  }
  if (l.kind != ModelOp::kEinsum || l.inputs.size() != 2) return false;
  const ParamDef* p = model.FindParam(l.inputs[1]);
  const size_t comma = l.equation.find(','), arrow = l.equation.find("->");
  if (p == nullptr || p->shape.size() != 2 || comma == std::string::npos ||
      arrow == std::string::npos || arrow < comma + 3) {
    return false;
  }
  const std::string rhs = l.equation.substr(comma + 1, arrow - comma - 1);
  const std::string out = l.equation.substr(arrow + 2);
  if (rhs.size() != 2) return false;
  const bool c0 = out.find(rhs[0]) == std::string::npos;
  const bool c1 = out.find(rhs[1]) == std::string::npos;
  if (c0 == c1) return false;  // both or neither contracted: not a projection
  kernel = p->name;
  contracted = c0 ? 0 : 1;
  return true;
}

// Megatron: a projection whose input is split over M (by an earlier column
// layer, through elementwise ops) is "row"; the others are "column".
// `row_first` swaps which kind a linear with an unsplit input becomes. An
// embed table used as the head (tied weights) stays whole: its vocabulary
// rarely divides (50257), and a vocab-parallel head is a choice of its own.
Layout Megatron(const ModelFile& model, const LayoutSpace& space, bool row_first) {
  Builder b(space);
  b.AllParams([](int rank) { return std::vector<AxisRole>(rank, AxisRole::kNone); });
  b.AllOuts(RoleOption::kBatch);
  b.Inputs(RoleOption::kBatch);
  std::map<std::string, bool> split;  // value -> split over M
  std::set<std::string> tables;       // embed tables: a tied head stays whole
  for (const LayerDef& l : model.layers) {
    if (l.kind == ModelOp::kEmbed) tables.insert(l.table);
  }
  for (const LayerDef& l : model.layers) {
    bool in_split = false;
    for (const std::string& in : l.inputs) in_split = in_split || split[in];
    std::string kernel;
    int contracted = 0;
    if (!KernelDims(model, l, kernel, contracted) || tables.count(kernel) > 0) {
      split[l.name] = in_split;
      continue;
    }
    const bool column = row_first ? in_split : !in_split;
    if (column) {
      b.SetMember(kernel, {RoleOption::kSpec, Dims(2, 1 - contracted, AxisRole::kModel)});
      if (!l.bias.empty()) b.SetMember(l.bias, {RoleOption::kSpec, Dims(1, 0, AxisRole::kModel)});
      const RoleOption::Kind split_out =
          b.FileHasOut(l.name) ? RoleOption::kBatchLastModel : RoleOption::kAbsent;
      b.SetMember(l.name, {row_first ? RoleOption::kBatch : split_out, {}});
      split[l.name] = !row_first;
    } else {
      b.SetMember(kernel, {RoleOption::kSpec, Dims(2, contracted, AxisRole::kModel)});
      b.SetMember(l.name, {row_first ? RoleOption::kBatchLastModel : RoleOption::kBatch, {}});
      split[l.name] = row_first;
    }
  }
  return b.layout();
}

}  // namespace

std::vector<NamedLayout> NamedLayouts(const ModelFile& model, const LayoutSpace& space) {
  auto none = [](int rank) { return std::vector<AxisRole>(rank, AxisRole::kNone); };
  std::vector<NamedLayout> out;
  {
    Builder b(space);  // option 0 of the out roles is the file's
    b.Inputs(RoleOption::kFile);
    bool expressible = true;
    for (const ParamDef& p : model.params) {
      std::vector<AxisRole> dims(p.shape.size(), AxisRole::kNone);
      for (int i = 0; i < p.sharding.size(); ++i) {
        const PartitionSpec::Entry& e = p.sharding.entry(i);
        if (e.empty()) continue;
        if (e.size() != 1) expressible = false;
        dims[i] = e[0] == space.data_axis ? AxisRole::kData : AxisRole::kModel;
        if (e[0] != space.data_axis && e[0] != space.model_axis) expressible = false;
      }
      b.SetMember(p.name, {RoleOption::kSpec, dims});
    }
    if (expressible) out.push_back({"as_written", b.layout()});
  }
  Builder replicated(space);
  replicated.AllParams(none);
  replicated.AllOuts(RoleOption::kBatch);  // P(): replicated inputs
  replicated.Inputs(RoleOption::kReplicated);
  out.push_back({"replicated", replicated.layout()});
  Builder dp(space);
  dp.AllParams(none);
  dp.AllOuts(RoleOption::kBatch);
  dp.Inputs(RoleOption::kBatch);
  out.push_back({"data_parallel", dp.layout()});
  Builder fsdp(space);
  fsdp.AllParams([](int rank) { return Dims(rank, rank >= 2 ? 0 : -1, AxisRole::kData); });
  fsdp.AllOuts(RoleOption::kBatch);
  fsdp.Inputs(RoleOption::kBatch);
  out.push_back({"fsdp", fsdp.layout()});
  if (!space.model_axis.empty()) {
    out.push_back({"megatron_column_row", Megatron(model, space, false)});
    out.push_back({"megatron_row_column", Megatron(model, space, true)});
  }
  return out;
}

}  // namespace meshserve
