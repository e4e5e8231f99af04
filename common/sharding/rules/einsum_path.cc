#include "common/sharding/rules/einsum_path.h"

#include <algorithm>
#include <limits>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

using LabelSet = std::set<char>;

constexpr absl::string_view kSymbols =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

LabelSet SetOf(const std::string& s) { return LabelSet(s.begin(), s.end()); }

LabelSet Union(const LabelSet& a, const LabelSet& b) {
  LabelSet out = a;
  out.insert(b.begin(), b.end());
  return out;
}

LabelSet Intersect(const LabelSet& a, const LabelSet& b) {
  LabelSet out;
  for (char c : a) {
    if (b.count(c)) out.insert(c);
  }
  return out;
}

// paths.optimal: depth first over every pair of the remaining operands (in
// ascending order, as CPython iterates a small int set), keeping the first
// path of least cost; the (k12, cost) of a pair is cached by its two label
// sets, as opt_einsum does. Returns the path in SSA ids.
class OptimalSearch {
 public:
  OptimalSearch(std::vector<LabelSet> inputs, LabelSet output, std::map<char, int64_t> sizes)
      : output_(std::move(output)), sizes_(std::move(sizes)) {
    std::vector<int> remaining;
    for (size_t i = 0; i < inputs.size(); ++i) remaining.push_back(static_cast<int>(i));
    Iterate({}, remaining, std::move(inputs), 0.0);
  }
  const std::vector<std::pair<int, int>>& best() const { return best_path_; }

 private:
  void Iterate(const std::vector<std::pair<int, int>>& path, const std::vector<int>& remaining,
               const std::vector<LabelSet>& inputs, double flops) {
    if (remaining.size() == 1) {
      best_flops_ = flops;
      best_path_ = path;
      return;
    }
    for (size_t a = 0; a < remaining.size(); ++a) {
      for (size_t b = a + 1; b < remaining.size(); ++b) {
        const int i = remaining[a], j = remaining[b];
        auto key = std::make_pair(inputs[i], inputs[j]);
        auto it = cache_.find(key);
        if (it == cache_.end()) it = cache_.emplace(key, K12Flops(inputs, remaining, i, j)).first;
        const double new_flops = flops + it->second.second;
        if (new_flops >= best_flops_) continue;
        std::vector<int> next;
        for (int r : remaining) {
          if (r != i && r != j) next.push_back(r);
        }
        next.push_back(static_cast<int>(inputs.size()));
        std::vector<LabelSet> next_inputs = inputs;
        next_inputs.push_back(it->second.first);
        std::vector<std::pair<int, int>> next_path = path;
        next_path.emplace_back(i, j);
        Iterate(next_path, next, next_inputs, new_flops);
      }
    }
  }

  // _calc_k12_flops and helpers.flop_count(either, shared - keep, 2, sizes).
  std::pair<LabelSet, double> K12Flops(const std::vector<LabelSet>& inputs,
                                       const std::vector<int>& remaining, int i, int j) const {
    const LabelSet either = Union(inputs[i], inputs[j]);
    const LabelSet shared = Intersect(inputs[i], inputs[j]);
    LabelSet keep = output_;
    for (int r : remaining) {
      if (r != i && r != j) keep = Union(keep, inputs[r]);
    }
    double size = 1;
    for (char c : either) size *= static_cast<double>(sizes_.at(c));
    bool inner = false;
    for (char c : shared) inner |= keep.count(c) == 0;
    return {Intersect(either, keep), size * (inner ? 2 : 1)};
  }

  LabelSet output_;
  std::map<char, int64_t> sizes_;
  double best_flops_ = std::numeric_limits<double>::infinity();
  std::vector<std::pair<int, int>> best_path_;
  std::map<std::pair<LabelSet, LabelSet>, std::pair<LabelSet, double>> cache_;
};

}  // namespace

absl::Status ExpandEllipsis(absl::string_view text, absl::Span<const int> ranks,
                            EinsumSubscripts* s) {
  std::string used;
  for (const std::string& in : s->inputs) used += in;
  used += s->out;
  int max_rank = 0;
  for (int r : ranks) max_rank = std::max(max_rank, r);
  std::string ellipse_inds;
  for (char c : kSymbols) {
    if (static_cast<int>(ellipse_inds.size()) == max_rank) break;
    if (used.find(c) == std::string::npos) ellipse_inds.push_back(c);
  }
  if (static_cast<int>(ellipse_inds.size()) < max_rank) {
    return InvalidArgument("einsum equation '", text, "': too many dims for the ellipsis");
  }
  auto valid = [](const std::string& sub) {
    return std::count(sub.begin(), sub.end(), '.') == 0 ||
           (std::count(sub.begin(), sub.end(), '.') == 3 && sub.find("...") != std::string::npos);
  };
  int longest = 0;
  for (size_t k = 0; k < s->inputs.size(); ++k) {
    std::string& sub = s->inputs[k];
    if (!valid(sub)) return InvalidArgument("einsum equation '", text, "': Invalid Ellipses.");
    if (sub.find('.') == std::string::npos) continue;
    int count = ranks[k] == 0 ? 0 : ranks[k] - static_cast<int>(sub.size() - 3);
    if (count < 0) {
      return InvalidArgument("einsum equation '", text, "': Ellipses lengths do not match.");
    }
    longest = std::max(longest, count);
    sub.replace(sub.find("..."), 3, ellipse_inds.substr(ellipse_inds.size() - count));
  }
  const std::string out_ellipse = ellipse_inds.substr(ellipse_inds.size() - longest);
  if (!valid(s->out)) return InvalidArgument("einsum equation '", text, "': Invalid Ellipses.");
  if (!s->explicit_output) {
    s->out = out_ellipse;
  } else if (s->out.find("...") != std::string::npos) {
    s->out.replace(s->out.find("..."), 3, out_ellipse);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<EinsumContraction>> EinsumContractionPath(
    absl::string_view text, const EinsumSubscripts& s,
    const std::vector<std::vector<int64_t>>& shapes) {
  std::map<char, int64_t> sizes;
  for (size_t t = 0; t < s.inputs.size(); ++t) {
    const std::string& term = s.inputs[t];
    if (term.size() != shapes[t].size()) {
      return InvalidArgument("einsum equation '", text, "': Einstein sum subscript '", term,
                             "' does not contain the correct number of indices for operand ",
                             t, " (rank ", shapes[t].size(), ").");
    }
    for (size_t c = 0; c < term.size(); ++c) {
      auto [it, inserted] = sizes.emplace(term[c], shapes[t][c]);
      if (inserted || it->second == shapes[t][c] || shapes[t][c] == 1) continue;
      if (it->second != 1) {
        return InvalidArgument("einsum equation '", text, "': label '",
                               std::string(1, term[c]), "' has sizes ", it->second, " and ",
                               shapes[t][c], " (Size of label '", std::string(1, term[c]),
                               "' for operand ", t, " does not match previous terms).");
      }
      it->second = shapes[t][c];
    }
  }
  const size_t n = s.inputs.size();
  std::vector<std::vector<int>> path;  // linear positions
  if (n == 1) {
    path = {{0}};
  } else if (n == 2) {
    path = {{0, 1}};
  } else if (n <= 4) {
    std::vector<LabelSet> sets;
    for (const std::string& in : s.inputs) sets.push_back(SetOf(in));
    OptimalSearch search(sets, SetOf(s.out), sizes);
    std::vector<int> ids;  // ssa_to_linear
    for (size_t i = 0; i < n; ++i) ids.push_back(static_cast<int>(i));
    int next_id = static_cast<int>(n);
    for (const auto& [a, b] : search.best()) {
      int pa = static_cast<int>(std::find(ids.begin(), ids.end(), a) - ids.begin());
      int pb = static_cast<int>(std::find(ids.begin(), ids.end(), b) - ids.begin());
      path.push_back({pa, pb});
      ids.erase(std::find(ids.begin(), ids.end(), a));
      ids.erase(std::find(ids.begin(), ids.end(), b));
      ids.push_back(next_id++);
    }
  } else {
    return Unimplemented("einsum equation '", text, "' has ", n, " operands: JAX's path search "
                         "for five or more (opt_einsum's branch and greedy searches) is not "
                         "mirrored; split the einsum");
  }
  std::vector<std::string> input_list = s.inputs;
  const LabelSet output = SetOf(s.out);
  std::vector<EinsumContraction> out;
  for (size_t step = 0; step < path.size(); ++step) {
    EinsumContraction c;
    c.positions = path[step];
    std::sort(c.positions.rbegin(), c.positions.rend());
    LabelSet contract, remain = output;
    for (size_t i = 0; i < input_list.size(); ++i) {
      bool in_step = std::count(c.positions.begin(), c.positions.end(), static_cast<int>(i)) > 0;
      (in_step ? contract : remain) = Union(in_step ? contract : remain, SetOf(input_list[i]));
    }
    for (char l : contract) {
      if (!remain.count(l)) c.removed.insert(l);
    }
    for (int p : c.positions) {
      c.inputs.push_back(input_list[p]);
      input_list.erase(input_list.begin() + p);
    }
    if (step + 1 == path.size()) {
      c.result = s.out;
    } else {  // labels kept, in order of first appearance in the popped inputs
      std::string all;
      for (const std::string& in : c.inputs) all += in;
      for (char l : all) {
        if (remain.count(l) && c.result.find(l) == std::string::npos) c.result.push_back(l);
      }
    }
    input_list.push_back(c.result);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace meshserve
