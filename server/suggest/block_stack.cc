// Pricing a stack of tied blocks from two short copies (block_stack.h).
#include "server/suggest/block_stack.h"

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace meshserve {
namespace {

// "layers.3.mlp" -> {prefix "layers", block 3, rest "mlp"}; block -1 when the
// name has no all-digit component.
struct BlockName {
  std::string prefix;
  int64_t block = -1;
  std::string rest;
};

BlockName Split(const std::string& name) {
  std::vector<std::string> parts = absl::StrSplit(name, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    int64_t b = 0;
    const bool digits = !parts[i].empty() && parts[i].find_first_not_of("0123456789") ==
                                                 std::string::npos;
    if (!digits || !absl::SimpleAtoi(parts[i], &b)) continue;
    return {absl::StrJoin(parts.begin(), parts.begin() + i, "."), b,
            absl::StrJoin(parts.begin() + i + 1, parts.end(), ".")};
  }
  return {};
}

std::vector<std::string> AllNames(const ModelFile& model) {
  std::vector<std::string> names;
  for (const ParamDef& p : model.params) names.push_back(p.name);
  for (const LayerDef& l : model.layers) names.push_back(l.name);
  return names;
}

}  // namespace

int64_t NumStackBlocks(const ModelFile& model) {
  std::set<std::string> prefixes;
  std::map<int64_t, std::set<std::string>> rests;  // block -> its names' rests
  for (const std::string& name : AllNames(model)) {
    BlockName b = Split(name);
    if (b.block < 0) continue;
    prefixes.insert(b.prefix);
    rests[b.block].insert(b.rest);
  }
  const int64_t n = static_cast<int64_t>(rests.size());
  if (prefixes.size() != 1 || n < 3 || rests.rbegin()->first != n - 1) return 0;
  for (const auto& [block, names] : rests) {
    if (names != rests.begin()->second) return 0;
  }
  return n;
}

ModelFile CutToBlocks(const ModelFile& model, int64_t k) {
  ModelFile m = model;
  auto kept = [k](const std::string& name) { return Split(name).block < k; };
  auto redirect = [k](std::string& ref) {
    BlockName b = Split(ref);
    if (b.block < k) return;
    ref = absl::StrCat(b.prefix, b.prefix.empty() ? "" : ".", k - 1, b.rest.empty() ? "" : ".",
                       b.rest);
  };
  m.params.clear();
  for (const ParamDef& p : model.params) {
    if (kept(p.name)) m.params.push_back(p);
  }
  m.layers.clear();
  for (const LayerDef& l : model.layers) {
    if (!kept(l.name)) continue;
    LayerDef cut = l;
    for (std::string& in : cut.inputs) redirect(in);
    for (std::string* ref : {&cut.kernel, &cut.bias, &cut.scale, &cut.table, &cut.where}) {
      if (!ref->empty()) redirect(*ref);
    }
    m.layers.push_back(std::move(cut));
  }
  for (std::string& out : m.outputs) redirect(out);
  return m;
}

Prediction ExtrapolateBlocks(const Prediction& one, const Prediction& two, int64_t n) {
  const double extra = static_cast<double>(n - 1);
  Prediction p = two;
  p.predicted_ms = one.predicted_ms + extra * (two.predicted_ms - one.predicted_ms);
  p.gemm_ms = one.gemm_ms + extra * (two.gemm_ms - one.gemm_ms);
  p.network_ms = one.network_ms + extra * (two.network_ms - one.network_ms);
  p.memory_ms = one.memory_ms + extra * (two.memory_ms - one.memory_ms);
  p.bytes_per_request = one.bytes_per_request + (n - 1) * (two.bytes_per_request - one.bytes_per_request);
  p.rounds = one.rounds + (n - 1) * (two.rounds - one.rounds);
  p.param_bytes_per_worker =
      one.param_bytes_per_worker + (n - 1) * (two.param_bytes_per_worker - one.param_bytes_per_worker);
  return p;
}

}  // namespace meshserve
