// `meshserve suggest`'s search (suggest.h).
#include "server/suggest/suggest.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/model/typed_model.h"
#include "server/suggest/block_stack.h"
#include "server/suggest/dp_search.h"
#include "server/suggest/layer_costs.h"

namespace meshserve {
namespace {

constexpr double kRejected = std::numeric_limits<double>::infinity();

// Evaluates layouts once per LayoutKey and remembers the kept ones.
class Evaluator {
 public:
  Evaluator(const ModelFile& model, const LayoutSpace& space, const SuggestOptions& options)
      : model_(WithoutText(model)),
        space_(space),
        options_(options),
        num_blocks_(options.price_blocks ? NumStackBlocks(model) : 0),
        priced_(num_blocks_ >= 3 ? CutToBlocks(model_, 2) : model_),
        costs_(options.figures),
        deadline_(std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                      std::chrono::duration<double>(options.max_search_s))) {}

  // Past max_search_s: the search stops (the baselines are always scored).
  bool OutOfTime() {
    if (options_.max_search_s > 0 && std::chrono::steady_clock::now() > deadline_) {
      stopped_ = true;
    }
    return stopped_;
  }
  bool stopped() const { return stopped_; }
  LayerCostCache& costs() { return costs_; }
  int64_t num_blocks() const { return num_blocks_; }

  // The layout's mean predicted ms on `mesh`, kRejected when it is not kept
  // (`why`, if given, says why).
  double Score(const Layout& layout, const Mesh& mesh, const std::string& name,
               std::string* why = nullptr) {
    ModelFile m = Materialize(priced_, space_, layout, mesh);
    std::string key = LayoutKey(m, mesh);
    auto it = scores_.find(key);
    if (it == scores_.end()) {
      ++num_evaluated_;
      layouts_.emplace(key, layout);
      it = scores_.emplace(key, Evaluate(std::move(m), mesh, name, key)).first;
    }
    if (why != nullptr) *why = why_[key];
    return it->second;
  }

  // The key Score gives `layout` on `mesh`.
  std::string Key(const Layout& layout, const Mesh& mesh) const {
    return LayoutKey(Materialize(priced_, space_, layout, mesh), mesh);
  }
  // `s` with its whole model: kept suggestions carry the priced copy (two
  // blocks of a stack) until listed.
  Suggestion Whole(Suggestion s) const {
    s.model = Materialize(model_, space_, layouts_.at(s.key), s.mesh);
    return s;
  }

  std::vector<Suggestion> Ranked() const {
    std::vector<const Suggestion*> all;
    for (const auto& [key, s] : kept_) all.push_back(&s);
    // Best first; on a tie fewer param bytes, then a named layout.
    std::sort(all.begin(), all.end(), [](const Suggestion* a, const Suggestion* b) {
      const int64_t pa = a->per_shape[0].param_bytes_per_worker;
      const int64_t pb = b->per_shape[0].param_bytes_per_worker;
      const bool sa = a->name == "search", sb = b->name == "search";
      return std::tie(a->mix_ms, pa, sa, a->key) < std::tie(b->mix_ms, pb, sb, b->key);
    });
    // Listed once: layouts typing alike, and layouts predicting the same
    // figures on the same mesh (e.g. a bias split or not: no real choice).
    std::vector<Suggestion> out;
    std::set<std::string> seen;
    for (const Suggestion* s : all) {
      const Prediction& p = s->per_shape[0];
      const std::string figures =
          absl::StrCat(s->mesh.ToString(), absl::StrFormat(" %.4f ", s->mix_ms),
                       p.bytes_per_request, " ", p.rounds, " ", p.param_bytes_per_worker);
      const bool new_types = seen.insert(p.types_key).second;
      if (seen.insert(figures).second && new_types) out.push_back(*s);
    }
    return out;
  }

  const Suggestion* Find(const std::string& key) const {
    auto it = kept_.find(key);
    return it == kept_.end() ? nullptr : &it->second;
  }
  int64_t num_evaluated() const { return num_evaluated_; }
  int64_t num_rejected_rules() const { return num_rejected_rules_; }
  int64_t num_rejected_memory() const { return num_rejected_memory_; }
  const absl::Status& first_rejection() const { return first_rejection_; }
  int64_t least_param_bytes() const { return least_param_bytes_; }

 private:
  double Evaluate(ModelFile m, const Mesh& mesh, const std::string& name, const std::string& key) {
    Suggestion s{name, mesh, std::move(m), {}, 0, key};
    for (const ShapeSet& shapes : options_.input_shapes) {
      absl::StatusOr<Prediction> p = Predict(s.model, mesh, shapes);
      if (!p.ok()) {
        ++num_rejected_rules_;
        why_[key] = std::string(p.status().message());
        if (first_rejection_.ok()) {
          first_rejection_ = absl::Status(p.status().code(),
                                          absl::StrCat(name, " on ", mesh.ToString(), ": ",
                                                       p.status().message()));
        }
        return kRejected;
      }
      s.per_shape.push_back(*p);
      s.mix_ms += p->predicted_ms / static_cast<double>(options_.input_shapes.size());
    }
    const int64_t bytes = s.per_shape[0].param_bytes_per_worker;
    least_param_bytes_ = std::min(least_param_bytes_, bytes);
    if (options_.memory_per_worker > 0 && bytes > options_.memory_per_worker) {
      ++num_rejected_memory_;
      why_[key] = absl::StrCat(bytes, " param bytes per worker > ", options_.memory_per_worker);
      return kRejected;
    }
    const double score = s.mix_ms;
    kept_.emplace(key, std::move(s));
    return score;
  }

  // Whole, or from 1- and 2-block copies of a stack (block_stack.h).
  absl::StatusOr<Prediction> Predict(const ModelFile& m, const Mesh& mesh, const ShapeSet& shapes) {
    auto predict = [&](const ModelFile& part) {
      return options_.memoize_layers ? costs_.Predict(part, mesh, shapes)
                                     : PredictAtShape(part, mesh, shapes, options_.figures);
    };
    if (num_blocks_ < 3) return predict(m);  // m: the model's first 2 blocks
    MS_ASSIGN_OR_RETURN(Prediction one, predict(CutToBlocks(m, 1)));
    MS_ASSIGN_OR_RETURN(Prediction two, predict(m));
    return ExtrapolateBlocks(one, two, num_blocks_);
  }

  // The file without its JSON text (copied with every layout otherwise).
  static ModelFile WithoutText(ModelFile m) {
    m.json_text.clear();
    return m;
  }

  const ModelFile model_;
  const LayoutSpace& space_;
  const SuggestOptions& options_;
  const int64_t num_blocks_;
  const ModelFile priced_;  // the model, or its first 2 blocks for a stack
  std::map<std::string, Layout> layouts_;  // by key, every scored layout
  LayerCostCache costs_;  // per-layer terms, compiled once per signature
  std::map<std::string, double> scores_;
  std::map<std::string, Suggestion> kept_;
  std::map<std::string, std::string> why_;  // rejected keys
  std::chrono::steady_clock::time_point deadline_;
  bool stopped_ = false;
  int64_t num_evaluated_ = 0, num_rejected_rules_ = 0, num_rejected_memory_ = 0;
  int64_t least_param_bytes_ = std::numeric_limits<int64_t>::max();
  absl::Status first_rejection_;
};

// Every layout of the space (odometer over the roles' options).
void Exhaustive(const LayoutSpace& space, const Mesh& mesh, Evaluator& eval) {
  Layout layout(space.roles.size(), 0);
  while (!eval.OutOfTime()) {
    eval.Score(layout, mesh, "search");
    size_t r = 0;
    for (; r < layout.size(); ++r) {
      if (++layout[r] < static_cast<int>(space.roles[r].options.size())) break;
      layout[r] = 0;
    }
    if (r == layout.size()) return;
  }
}

// One role's options (and jointly its coupled out roles'); true if improved.
bool ImproveRole(const LayoutSpace& space, const Mesh& mesh, size_t r, Evaluator& eval,
                 Layout& best, double& best_score) {
  bool improved = false;
  auto consider = [&](const Layout& layout) {
    const double s = eval.Score(layout, mesh, "search");
    if (s < best_score) {
      best_score = s;
      best = layout;
      improved = true;
    }
  };
  const Layout start = best;
  for (size_t o = 0; o < space.roles[r].options.size() && !eval.OutOfTime(); ++o) {
    Layout l = start;
    l[r] = static_cast<int>(o);
    consider(l);
    for (int c : space.coupled[r]) {
      for (size_t oc = 0; oc < space.roles[c].options.size(); ++oc) {
        l[c] = static_cast<int>(oc);
        consider(l);
      }
      l[c] = start[c];
    }
  }
  return improved;
}

void CoordinateDescent(const LayoutSpace& space, const Mesh& mesh, Layout best,
                       double best_score, int max_passes, Evaluator& eval) {
  for (int pass = 0; pass < max_passes && !eval.OutOfTime(); ++pass) {
    bool improved = false;
    for (size_t r = 0; r < space.roles.size(); ++r) {
      improved = ImproveRole(space, mesh, r, eval, best, best_score) || improved;
    }
    if (!improved) return;
  }
}

// The DP's layout on `mesh` (dp_search.h), when it applies: not for a stack
// priced from block copies (its tied roles would stay open across the
// blocks), nor past dp_max_states.
std::optional<Layout> DpLayout(const ModelFile& model, const LayoutSpace& space, const Mesh& mesh,
                               const SuggestOptions& options, Evaluator& eval) {
  if (options.dp_max_states <= 0 || eval.num_blocks() >= 3 || eval.OutOfTime()) return std::nullopt;
  std::optional<DpResult> dp =
      DpBestLayout(model, space, mesh, options.input_shapes, eval.costs(), options.dp_max_states,
                   [&eval] { return eval.OutOfTime(); });
  if (!dp.has_value()) return std::nullopt;
  return dp->layout;
}

// Every input named with its rank and the file's fixed dims, nothing else.
absl::Status CheckShapes(const ModelFile& model, const std::vector<ShapeSet>& sets) {
  for (const ShapeSet& shapes : sets) {
    for (const auto& [name, dims] : shapes) {
      if (model.FindInput(name) == nullptr) {
        return absl::NotFoundError(absl::StrCat("--input_shape ", name, ": model '", model.name,
                                                "' has no input '", name, "'"));
      }
    }
    for (const InputDef& in : model.inputs) {
      auto it = shapes.find(in.name);
      if (it == shapes.end()) {
        return InvalidArgument("no --input_shape for input '", in.name, "' in a shape set");
      }
      bool fits = it->second.size() == in.shape.size();
      for (size_t i = 0; fits && i < in.shape.size(); ++i) {
        fits = in.shape[i] == -1 || in.shape[i] == it->second[i];
      }
      if (!fits) {
        return InvalidArgument("--input_shape ", in.name, "=", absl::StrJoin(it->second, ","),
                               " does not match the model's [", absl::StrJoin(in.shape, ","),
                               "] (-1: any)");
      }
    }
  }
  return absl::OkStatus();
}

// The best of `ranked` (up to 1 + num_alternatives) that type whole: priced
// from block copies, the whole model must type too (it does when the blocks
// are alike; checked, being cheap next to compiling).
std::vector<Suggestion> TypedWhole(std::vector<Suggestion> ranked, const SuggestOptions& options,
                                   const Evaluator& eval) {
  std::vector<Suggestion> out;
  for (Suggestion& r : ranked) {
    Suggestion s = eval.Whole(std::move(r));
    bool types = true;
    for (const ShapeSet& shapes : options.input_shapes) {
      types = types && TypeModel(s.model, s.mesh, shapes).ok();
    }
    if (types) out.push_back(std::move(s));
    if (out.size() > static_cast<size_t>(options.num_alternatives)) break;
  }
  return out;
}

// Why no layout was kept (see Suggest's \error).
absl::Status NothingKept(const ModelFile& model, const SuggestOptions& options,
                         const Evaluator& eval) {
  if (eval.num_rejected_memory() > 0) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "no layout of model '", model.name, "' on ", options.num_workers,
        " workers fits --memory_per_worker ", options.memory_per_worker,
        " bytes: the smallest needs ", eval.least_param_bytes(), " param bytes per worker"));
  }
  std::vector<std::string> autos;  // "sharding": "auto" params the search could not place
  for (const ParamDef& p : model.params) {
    if (p.auto_sharding) autos.push_back(absl::StrCat("'", p.name, "'"));
  }
  return InvalidArgument("no layout of model '", model.name, "' on ", options.num_workers,
                         " workers types under JAX's rules",
                         autos.empty() ? "" : absl::StrCat(" with param ",
                                                           absl::StrJoin(autos, ", "),
                                                           " sharding \"auto\""),
                         "; first: ", eval.first_rejection().message());
}

}  // namespace

std::string Suggestion::LayoutText() const {
  std::string out = mesh.ToString();
  std::set<std::string> seen;  // one entry per role: "h.#.mlp.c_fc.weight=P(...)"
  auto add = [&](const std::string& name, const char* sep, const PartitionSpec& spec) {
    const std::string role = RoleKey(name);
    if (seen.insert(absl::StrCat(sep, role)).second) absl::StrAppend(&out, "  ", role, sep, spec.ToString());
  };
  for (const InputDef& in : model.inputs) add(in.name, "=", in.sharding);
  for (const ParamDef& p : model.params) add(p.name, "=", p.sharding);
  for (const LayerDef& l : model.layers) {
    if (l.out_sharding.has_value()) add(l.name, ">", *l.out_sharding);
  }
  return out;
}

absl::StatusOr<SuggestResult> Suggest(const ModelFile& model, const SuggestOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (options.input_shapes.empty()) return InvalidArgument("no --input_shape given");
  MS_RETURN_IF_ERROR(CheckShapes(model, options.input_shapes));
  MS_ASSIGN_OR_RETURN(LayoutSpace space, BuildLayoutSpace(model, options.num_workers,
                                                           &options.input_shapes.front()));
  const std::vector<NamedLayout> named = NamedLayouts(model, space);
  Evaluator eval(model, space, options);
  SuggestResult result;
  const bool exhaustive = space.NumLayouts() <= options.exhaustive_limit;
  const bool dp = !exhaustive && options.dp_max_states > 0 && eval.num_blocks() < 3;
  result.method = exhaustive ? "exhaustive" : dp ? "dp + coordinate descent" : "coordinate descent";
  std::map<std::string, std::pair<double, std::string>> baseline_best;  // name -> (ms, key)
  std::map<std::string, std::vector<std::string>> rejections;  // named -> per mesh
  for (const Mesh& mesh : space.meshes) {
    Layout seed(space.roles.size(), 0);
    double seed_score = eval.Score(seed, mesh, "search");
    for (const NamedLayout& n : named) {
      std::string why;
      const double s = eval.Score(n.layout, mesh, n.name, &why);
      if (s == kRejected && !why.empty()) {
        rejections[n.name].push_back(absl::StrCat(mesh.ToString(), ": ", why));
      }
      if (s < seed_score) {
        seed_score = s;
        seed = n.layout;
      }
      const std::string key = eval.Key(n.layout, mesh);
      auto it = baseline_best.find(n.name);
      if (s < kRejected && (it == baseline_best.end() || s < it->second.first)) {
        baseline_best[n.name] = {s, key};
      }
    }
    if (exhaustive) {
      Exhaustive(space, mesh, eval);
      continue;
    }
    if (std::optional<Layout> dp = DpLayout(model, space, mesh, options, eval)) {
      const double s = eval.Score(*dp, mesh, "search");
      if (s < seed_score) {
        seed_score = s;
        seed = *dp;
      }
    }
    CoordinateDescent(space, mesh, seed, seed_score, options.max_passes, eval);
  }
  if (eval.stopped()) {
    absl::StrAppend(&result.method, " (stopped at the ", options.max_search_s, " s budget)");
  }
  result.num_evaluated = eval.num_evaluated();
  result.num_rejected_rules = eval.num_rejected_rules();
  result.num_rejected_memory = eval.num_rejected_memory();
  std::vector<Suggestion> ranked = TypedWhole(eval.Ranked(), options, eval);
  if (ranked.empty()) return NothingKept(model, options, eval);
  result.choice = ranked[0];
  for (size_t i = 1; i < ranked.size() && static_cast<int>(i) <= options.num_alternatives; ++i) {
    result.alternatives.push_back(ranked[i]);
  }
  for (const NamedLayout& n : named) {
    auto it = baseline_best.find(n.name);
    if (it == baseline_best.end()) {
      result.rejected_baselines.push_back({n.name, rejections[n.name]});
      continue;
    }
    if (const Suggestion* s = eval.Find(it->second.second)) {
      result.baselines.push_back(eval.Whole(*s));
      result.baselines.back().name = n.name;
    }
  }
  result.search_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace meshserve
