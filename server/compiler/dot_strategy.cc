// The dot strategy (strategy.h): linear and einsum as one labelled
// contraction, with the compute layout chosen by cost.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/rules/einsum.h"
#include "server/compiler/layer_strategy.h"

namespace meshserve {
namespace {

bool Has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// What one exchange between workers costs on top of its bytes, in bytes: a
// reshard that crosses the network is a round of peer messages the workers
// wait for (~0.1 ms here), the time loopback moves ~128 KiB in. So of two
// layouts the one with an exchange fewer wins unless it moves that many more
// bytes (e.g. a small kernel gathered beats gathering the rows and
// all-to-all'ing the result).
constexpr int64_t kExchangeCostBytes = 128 << 10;

struct Candidate {
  std::map<char, PartitionSpec::Entry> label_axes;
  NamedSharding lhs, rhs, dot, out;
  std::string dot_labels;
  int64_t network = 0, flops = 0, device_bytes = 0;
  std::string description;
};

struct Problem {
  DotSpecLabels labels;
  std::map<char, int64_t> sizes;
  std::string all_labels;  // unique, first-seen order
};

std::vector<PartitionSpec::Entry> EntriesFor(const std::string& labels,
                                             const std::map<char, PartitionSpec::Entry>& axes) {
  std::vector<PartitionSpec::Entry> entries;
  for (char c : labels) {
    auto it = axes.find(c);
    entries.push_back(it == axes.end() ? PartitionSpec::Entry{} : it->second);
  }
  return entries;
}

// Builds the candidate for `assignment` (per mesh axis: label index or -1);
// false when a label's size is not divisible by its axes.
bool BuildCandidate(const Problem& p, const Mesh& mesh, const std::vector<int>& axis_ids,
                    const std::vector<int>& assignment, Candidate& c) {
  const DotSpecLabels& l = p.labels;
  c.label_axes.clear();
  std::vector<std::string> unreduced;
  std::vector<std::string> parts;
  for (size_t i = 0; i < assignment.size(); ++i) {
    if (assignment[i] < 0) continue;
    const MeshAxis& axis = mesh.axis(axis_ids[i]);
    char label = p.all_labels[assignment[i]];
    c.label_axes[label].push_back(axis.name);
    bool contracting = !Has(l.out, label);
    if (contracting) unreduced.push_back(axis.name);
    parts.push_back(absl::StrCat(axis.name, "->", std::string(1, label),
                                 contracting ? "(contract)" : ""));
  }
  c.flops = 2;
  for (char label : p.all_labels) {
    int64_t k = 1;
    for (const std::string& a : c.label_axes[label]) k *= mesh.axis(*mesh.AxisIndex(a)).size;
    if (p.sizes.at(label) % k != 0) return false;
    c.flops *= p.sizes.at(label) / k;
  }
  // dot_general's result order: batch (lhs order), lhs free, rhs free.
  c.dot_labels.clear();
  for (char x : l.lhs) {
    if (Has(l.rhs, x) && Has(l.out, x)) c.dot_labels += x;
  }
  for (char x : l.lhs) {
    if (!Has(l.rhs, x)) c.dot_labels += x;
  }
  for (char x : l.rhs) {
    if (!Has(l.lhs, x)) c.dot_labels += x;
  }
  c.lhs = ShardingOf(mesh, l.lhs.size(), EntriesFor(l.lhs, c.label_axes));
  c.rhs = ShardingOf(mesh, l.rhs.size(), EntriesFor(l.rhs, c.label_axes));
  c.dot = ShardingOf(mesh, c.dot_labels.size(), EntriesFor(c.dot_labels, c.label_axes), unreduced);
  c.out = ShardingOf(mesh, l.out.size(), EntriesFor(l.out, c.label_axes), unreduced);
  c.description = parts.empty() ? "replicated compute" : absl::StrJoin(parts, " ");
  return true;
}

std::vector<int64_t> ShapeOf(const std::string& labels, const std::map<char, int64_t>& sizes) {
  std::vector<int64_t> shape;
  for (char c : labels) shape.push_back(sizes.at(c));
  return shape;
}

absl::StatusOr<Candidate> ChooseLayout(const Problem& p, const LayerContext& ctx,
                                       const Placed& lhs, const Placed& rhs) {
  ProgramEmitter& em = *ctx.emitter;
  const Mesh& mesh = em.mesh();
  std::vector<int> axis_ids;
  for (int i = 0; i < mesh.num_axes(); ++i) {
    if (mesh.axis(i).size > 1) axis_ids.push_back(i);
  }
  const int num_labels = static_cast<int>(p.all_labels.size());
  std::vector<int> assignment(axis_ids.size(), -1);
  std::optional<Candidate> best;
  absl::Status last_error = absl::OkStatus();
  while (true) {
    Candidate c;
    if (BuildCandidate(p, mesh, axis_ids, assignment, c)) {
      Placed result{"", ShapeOf(p.labels.out, p.sizes), c.out,
                    c.out.spec().unreduced().empty() ? ctx.result.dtype : DType::kFloat32};
      auto a = em.PlanCost(lhs, c.lhs);
      auto b = em.PlanCost(rhs, c.rhs);
      auto r = em.PlanCost(result, ctx.result.sharding);
      if (a.ok() && b.ok() && r.ok()) {
        c.network = a->network_bytes + b->network_bytes + r->network_bytes;
        for (int64_t bytes : {a->network_bytes, b->network_bytes, r->network_bytes}) {
          if (bytes > 0) c.network += kExchangeCostBytes;
        }
        c.device_bytes = a->device_bytes + b->device_bytes + r->device_bytes;
        if (!best.has_value() ||
            std::tie(c.network, c.flops, c.device_bytes) <
                std::tie(best->network, best->flops, best->device_bytes)) {
          best = std::move(c);
        }
      } else {
        last_error = !a.ok() ? a.status() : !b.ok() ? b.status() : r.status();
      }
    }
    // Next assignment (odometer over -1..num_labels-1 per axis).
    size_t i = 0;
    for (; i < assignment.size(); ++i) {
      if (++assignment[i] < num_labels) break;
      assignment[i] = -1;
    }
    if (i == assignment.size()) break;
  }
  if (!best.has_value()) {
    return Unimplemented("no compute layout produces ", ctx.result.ToString(),
                         last_error.ok() ? "" : absl::StrCat(": ", last_error.message()));
  }
  return *std::move(best);
}

std::vector<int64_t> Positions(const std::string& labels, const std::string& of) {
  std::vector<int64_t> out;
  for (char c : of) out.push_back(static_cast<int64_t>(labels.find(c)));
  return out;
}

absl::StatusOr<Problem> MakeProblem(const LayerContext& ctx) {
  Problem p;
  const Placed& lhs = ctx.operands[0];
  const Placed& rhs = ctx.operands[1];
  if (ctx.layer->kind == ModelOp::kLinear) {
    if (lhs.shape.empty() || lhs.shape.size() > 20 || rhs.shape.size() != 2) {
      return InvalidArgument("linear needs an input of rank >= 1 and a rank-2 kernel");
    }
    for (size_t i = 0; i + 1 < lhs.shape.size(); ++i) p.labels.lhs += static_cast<char>('a' + i);
    p.labels.out = p.labels.lhs + "z";
    p.labels.lhs += "y";
    p.labels.rhs = "yz";
  } else {
    MS_ASSIGN_OR_RETURN(p.labels, ParseEinsumLabels(ctx.layer->equation));
  }
  if (p.labels.lhs.size() != lhs.shape.size() || p.labels.rhs.size() != rhs.shape.size()) {
    return InvalidArgument("equation ranks do not match the operands");
  }
  for (size_t i = 0; i < p.labels.lhs.size(); ++i) p.sizes[p.labels.lhs[i]] = lhs.shape[i];
  for (size_t i = 0; i < p.labels.rhs.size(); ++i) p.sizes[p.labels.rhs[i]] = rhs.shape[i];
  for (char c : p.labels.lhs + p.labels.rhs) {
    if (!Has(p.all_labels, c)) p.all_labels += c;
  }
  return p;
}

}  // namespace

// ParseEinsumEquation's grammar, restricted to what the compiler lowers:
// an explicit output and no label summed away in one operand.
absl::StatusOr<DotSpecLabels> ParseEinsumLabels(absl::string_view equation) {
  MS_ASSIGN_OR_RETURN(EinsumEquation e, ParseEinsumEquation(equation));
  if (!e.explicit_output) return InvalidArgument("einsum equation '", equation, "' needs '->'");
  DotSpecLabels l{e.lhs, e.rhs, e.out};
  for (char c : l.lhs + l.rhs) {
    if (!Has(l.out, c) && (Has(l.lhs, c) != Has(l.rhs, c))) {
      return Unimplemented("einsum equation '", equation, "': label '", std::string(1, c),
                           "' is summed away in one operand");
    }
  }
  return l;
}

absl::StatusOr<Placed> CompileDotLayer(const LayerContext& ctx) {
  ProgramEmitter& em = *ctx.emitter;
  MS_ASSIGN_OR_RETURN(Problem p, MakeProblem(ctx));
  const Placed& lhs = ctx.operands[0];
  const Placed& rhs = ctx.operands[1];
  const bool has_bias = !ctx.layer->bias.empty();
  if (has_bias && !ctx.result.spec().unreduced().empty()) {
    return Unimplemented(ModelOpName(ctx.layer->kind), " with a bias and an unreduced result");
  }
  MS_ASSIGN_OR_RETURN(Candidate c, ChooseLayout(p, ctx, lhs, rhs));
  ctx.info->strategy = absl::StrCat("dot ", p.labels.lhs, ",", p.labels.rhs, "->", p.labels.out,
                                    ": ", c.description);
  ctx.info->max_device_flops = c.flops;
  MS_ASSIGN_OR_RETURN(Placed lhs_c, em.Reshard(lhs, c.lhs, lhs.dtype, ctx.operand_names[0],
                                               "lhs", ctx.info));
  MS_ASSIGN_OR_RETURN(Placed rhs_c, em.Reshard(rhs, c.rhs, rhs.dtype, ctx.operand_names[1],
                                               "rhs", ctx.info));
  const bool partial = !c.dot.spec().unreduced().empty();
  const DType dtype = partial ? DType::kFloat32 : ctx.result.dtype;
  Placed dot{em.NewBuffer(ctx.layer->name), ShapeOf(c.dot_labels, p.sizes), c.dot, dtype};
  std::string contract;
  for (char x : p.labels.lhs) {
    if (Has(p.labels.rhs, x) && !Has(p.labels.out, x)) contract += x;
  }
  std::string batch = c.dot_labels.substr(0, 0);
  for (char x : p.labels.lhs) {
    if (Has(p.labels.rhs, x) && Has(p.labels.out, x)) batch += x;
  }
  ComputeStepIr proto;
  proto.op = ComputeOp::kDotGeneral;
  proto.inputs = {lhs_c.buffer, rhs_c.buffer};
  proto.lhs_contracting = Positions(p.labels.lhs, contract);
  proto.rhs_contracting = Positions(p.labels.rhs, contract);
  proto.lhs_batch = Positions(p.labels.lhs, batch);
  proto.rhs_batch = Positions(p.labels.rhs, batch);
  em.ComputeEverywhere(dot, [&](int64_t) { return proto; });
  Placed out = dot;
  if (c.dot_labels != p.labels.out) {
    out = Placed{em.NewBuffer(ctx.layer->name), ShapeOf(p.labels.out, p.sizes), c.out, dtype};
    ComputeStepIr t;
    t.op = ComputeOp::kTranspose;
    t.inputs = {dot.buffer};
    t.perm = Positions(c.dot_labels, p.labels.out);
    em.ComputeEverywhere(out, [&](int64_t) { return t; });
  }
  MS_ASSIGN_OR_RETURN(Placed result, em.Reshard(out, ctx.result.sharding, ctx.result.dtype,
                                                ctx.layer->name, "result", ctx.info));
  if (!has_bias) return result;
  const Placed& bias = ctx.operands[2];
  NamedSharding bias_layout =
      ShardingOf(em.mesh(), 1, {ctx.result.spec().entry(ctx.result.rank() - 1)});
  MS_ASSIGN_OR_RETURN(Placed bias_c, em.Reshard(bias, bias_layout, bias.dtype,
                                                ctx.operand_names[2], "bias", ctx.info));
  Placed with_bias{em.NewBuffer(ctx.layer->name), result.shape, result.sharding,
                   ctx.result.dtype};
  ComputeStepIr add;
  add.op = ComputeOp::kAdd;
  add.inputs = {result.buffer, bias_c.buffer};
  em.ComputeEverywhere(with_bias, [&](int64_t) { return add; });
  return with_bias;
}

}  // namespace meshserve
