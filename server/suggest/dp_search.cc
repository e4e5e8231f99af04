// The layout search as DP over the layer graph (dp_search.h).
#include "server/suggest/dp_search.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/model/typed_model.h"

namespace meshserve {
namespace {

using Types = std::map<std::string, ArrayType>;  // live value -> type

struct State {
  Layout layout;  // -1: not decided yet
  double cost = 0;
  std::vector<Types> live;  // per shape set
};

// Who touches what, by layer index.
struct Graph {
  std::map<std::string, int> role_of;      // param or out layer -> role
  std::vector<int> role_last;              // last layer touching the role
  std::map<std::string, int> first_read;   // param -> first layer reading it
  std::map<std::string, int> last_read;    // value -> last reader (outputs: past the end)
};

Graph BuildGraph(const ModelFile& model, const LayoutSpace& space) {
  Graph g;
  for (size_t r = 0; r < space.roles.size(); ++r) {
    for (const std::string& m : space.roles[r].members) g.role_of[m] = static_cast<int>(r);
  }
  g.role_last.assign(space.roles.size(), -1);
  g.role_last[0] = std::numeric_limits<int>::max();  // the inputs role stays open
  const int n = static_cast<int>(model.layers.size());
  for (int i = 0; i < n; ++i) {
    const LayerDef& l = model.layers[i];
    for (const std::string& v : LayerOperands(l)) {
      g.last_read[v] = i;
      auto r = g.role_of.find(v);
      if (r != g.role_of.end() && model.FindParam(v) != nullptr) {
        g.role_last[r->second] = std::max(g.role_last[r->second], i);
        g.first_read.emplace(v, i);
      }
    }
    auto r = g.role_of.find(l.name);
    if (r != g.role_of.end()) g.role_last[r->second] = std::max(g.role_last[r->second], i);
  }
  for (const std::string& o : model.outputs) g.last_read[o] = n;
  return g;
}

Layout Filled(Layout layout) {
  for (int& o : layout) o = std::max(o, 0);
  return layout;
}

std::string StateKey(const State& s, const Graph& g, int i) {
  std::string key;
  for (size_t r = 0; r < s.layout.size(); ++r) {
    if (g.role_last[r] > i) absl::StrAppend(&key, s.layout[r], ",");
  }
  for (const Types& live : s.live) {
    for (const auto& [name, t] : live) {
      absl::StrAppend(&key, ";", name, "=", t.ToString(), t.spec().ToString());
    }
    key += "|";
  }
  return key;
}

// The model's name and mesh axes, nothing else.
ModelFile Shell(const ModelFile& m) {
  ModelFile sub;
  sub.name = m.name;
  sub.mesh_axes = m.mesh_axes;
  return sub;
}

// The inputs' types per shape set under the inputs role's option.
std::optional<std::vector<Types>> InputTypes(const ModelFile& m, const Mesh& mesh,
                                             const std::vector<ShapeSet>& shapes) {
  ModelFile sub = Shell(m);
  sub.inputs = m.inputs;
  std::vector<Types> out;
  for (const ShapeSet& s : shapes) {
    absl::StatusOr<TypedModel> typed = TypeModel(sub, mesh, s);
    if (!typed.ok()) return std::nullopt;
    out.push_back(typed->types);
  }
  return out;
}

struct Step {
  const ModelFile& model;
  const LayoutSpace& space;
  const Mesh& mesh;
  const std::vector<ShapeSet>& shapes;
  LayerCostCache& costs;
  const Graph& g;
  const std::function<bool()>& stop;
};

// `state` through layer i under `layout` (its roles at i decided). nullopt:
// JAX's rules or the compiler reject it; an error: a live value is partial.
absl::StatusOr<std::optional<State>> Advance(const Step& st, int i, const State& state,
                                             const Layout& layout) {
  const ModelFile m = Materialize(st.model, st.space, Filled(layout), st.mesh);
  const LayerDef& layer = m.layers[i];
  State next{layout, state.cost, {}};
  const CostFigures& f = st.costs.figures();
  for (size_t s = 0; s < st.shapes.size(); ++s) {
    ModelFile sub = Shell(m);
    ShapeSet in_shapes;
    ModelFile first = Shell(m);  // the params read here first
    for (const std::string& v : LayerOperands(layer)) {
      if (const ParamDef* p = m.FindParam(v)) {
        if (sub.FindParam(v) == nullptr) sub.params.push_back(*p);
        if (st.g.first_read.at(v) == i && first.FindParam(v) == nullptr) first.params.push_back(*p);
        continue;
      }
      auto t = state.live[s].find(v);
      if (t == state.live[s].end()) return std::optional<State>();
      if (!t->second.spec().unreduced().empty()) {
        return absl::UnimplementedError(absl::StrCat("value '", v, "' is partial"));
      }
      if (sub.FindInput(v) != nullptr) continue;
      sub.inputs.push_back(InputDef{v, t->second.shape, t->second.spec(), t->second.dtype});
      in_shapes[v] = t->second.shape;
    }
    sub.layers.push_back(layer);
    absl::StatusOr<TypedModel> typed = TypeModel(sub, st.mesh, in_shapes);
    if (!typed.ok()) return std::optional<State>();
    absl::StatusOr<LayerTerms> terms = st.costs.Layer(*typed, layer);
    if (!terms.ok()) return std::optional<State>();
    TypedModel params{first, st.mesh, typed->types, {}};
    const double ms = terms->Ms(f, st.mesh.num_devices()) +
                      HostSlowdown(f, st.mesh.num_devices()) *
                          static_cast<double>(ParamBytesPerDevice(params)) / f.memory_bytes_per_s *
                          1e3;
    next.cost += ms / static_cast<double>(st.shapes.size());
    Types live = state.live[s];
    live[layer.name] = typed->TypeOf(layer.name);
    for (const std::string& v : LayerOperands(layer)) {
      if (st.g.last_read.count(v) > 0 && st.g.last_read.at(v) == i) live.erase(v);
    }
    if (st.g.last_read.count(layer.name) == 0) live.erase(layer.name);
    next.live.push_back(std::move(live));
  }
  return std::optional<State>(std::move(next));
}

// The roles layer i decides in `layout` (not decided yet, touched at i).
std::vector<int> Undecided(const Step& st, int i, const Layout& layout) {
  std::vector<int> out;
  const LayerDef& l = st.model.layers[i];
  std::vector<std::string> names = LayerOperands(l);
  names.push_back(l.name);
  for (const std::string& v : names) {
    auto r = st.g.role_of.find(v);
    if (r == st.g.role_of.end() || layout[r->second] >= 0) continue;
    if (std::find(out.begin(), out.end(), r->second) == out.end()) out.push_back(r->second);
  }
  return out;
}

// Every state after layer i; false when over max_states or not applicable.
bool StepLayer(const Step& st, int i, const std::map<std::string, State>& cur,
               std::map<std::string, State>& next, int64_t max_states) {
  for (const auto& [key, state] : cur) {
    if (st.stop && st.stop()) return false;
    const std::vector<int> roles = Undecided(st, i, state.layout);
    Layout layout = state.layout;
    for (int r : roles) layout[r] = 0;
    while (true) {
      absl::StatusOr<std::optional<State>> s = Advance(st, i, state, layout);
      if (!s.ok()) return false;
      if (s->has_value()) {
        const std::string k = StateKey(**s, st.g, i);
        auto it = next.find(k);
        if (it == next.end() || (*s)->cost < it->second.cost) next[k] = std::move(**s);
        if (static_cast<int64_t>(next.size()) > max_states) return false;
      }
      size_t j = 0;
      for (; j < roles.size(); ++j) {
        if (++layout[roles[j]] < static_cast<int>(st.space.roles[roles[j]].options.size())) break;
        layout[roles[j]] = 0;
      }
      if (j == roles.size()) break;
    }
  }
  return true;
}

// A final state's outputs' gather and the layout-independent terms, in ms.
double FinalTerms(const Step& st, const State& s, const std::vector<Types>& inputs) {
  const CostFigures& f = st.costs.figures();
  const double n = static_cast<double>(st.mesh.num_devices());
  double ms = f.request_overhead_ms;
  for (size_t k = 0; k < st.shapes.size(); ++k) {
    TypedModel typed{st.model, st.mesh, s.live[k], {}};
    int64_t bytes = 0;
    for (const auto& [name, dims] : st.shapes[k]) bytes += inputs[k].at(name).NumBytes();
    for (const std::string& out : st.model.outputs) {
      bytes += s.live[k].at(out).NumBytes();
      absl::StatusOr<LayerTerms> t = st.costs.Gather(typed, out);
      if (!t.ok()) return std::numeric_limits<double>::infinity();
      ms += t->Ms(f, st.mesh.num_devices()) / static_cast<double>(st.shapes.size());
    }
    ms += static_cast<double>(bytes) / (n * f.link_bytes_per_s) * 1e3 /
          static_cast<double>(st.shapes.size());
  }
  return ms;
}

}  // namespace

std::optional<DpResult> DpBestLayout(const ModelFile& model, const LayoutSpace& space,
                                     const Mesh& mesh, const std::vector<ShapeSet>& shapes,
                                     LayerCostCache& costs, int64_t max_states,
                                     const std::function<bool()>& stop) {
  const Graph g = BuildGraph(model, space);
  const Step st{model, space, mesh, shapes, costs, g, stop};
  std::map<std::string, State> cur;
  std::map<int, std::vector<Types>> inputs;  // inputs option -> input types
  for (size_t o = 0; o < space.roles[0].options.size(); ++o) {
    State s{Layout(space.roles.size(), -1), 0, {}};
    s.layout[0] = static_cast<int>(o);
    std::optional<std::vector<Types>> types =
        InputTypes(Materialize(model, space, Filled(s.layout), mesh), mesh, shapes);
    if (!types.has_value()) continue;
    s.live = *types;
    inputs[o] = *types;
    cur[StateKey(s, g, -1)] = std::move(s);
  }
  DpResult best;
  for (int i = 0; i < static_cast<int>(model.layers.size()); ++i) {
    std::map<std::string, State> next;
    if (!StepLayer(st, i, cur, next, max_states)) return std::nullopt;
    best.max_states = std::max<int64_t>(best.max_states, static_cast<int64_t>(next.size()));
    cur = std::move(next);
  }
  double best_ms = std::numeric_limits<double>::infinity();
  for (const auto& [key, s] : cur) {
    const double ms = s.cost + FinalTerms(st, s, inputs.at(s.layout[0]));
    if (ms < best_ms) {
      best_ms = ms;
      best.layout = Filled(s.layout);
    }
  }
  if (best.layout.empty()) return std::nullopt;
  best.mix_ms = best_ms;
  return best;
}

}  // namespace meshserve
