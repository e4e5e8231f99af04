// `meshserve demo`: the two examples of the seed discussion (Flax NNX explicit
// sharding), in human form, with the reshard plans they need. One worker per
// device. Types come from the rules library (common/sharding/rules).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/command.h"
#include "common/conformance/plan_request.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"
#include "common/sharding/reshard_plan.h"
#include "common/sharding/rules/dot_general.h"
#include "common/sharding/rules/elementwise.h"
#include "common/sharding/visualize.h"

namespace meshserve {
namespace client {
namespace {

void Print(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

PartitionSpec Spec(const char* text) {
  absl::StatusOr<PartitionSpec> spec = ParsePartitionSpec(text);
  return spec.ok() ? *spec : PartitionSpec();
}

// Prints "name: type" and, for rank <= 2, the visualisation.
void ShowType(const char* name, const ArrayType& type) {
  Print(absl::StrCat(name, ": ", type.ToString(), "\n"));
  if (type.rank() == 1 || type.rank() == 2) {
    absl::StatusOr<std::string> picture = VisualizeSharding(type.shape, type.sharding);
    Print(picture.ok() ? *picture + "\n" : picture.status().ToString() + "\n");
  }
}

// Plans `from` -> `to` (one worker per device) and prints the table.
absl::StatusOr<ReshardPlan> ShowPlan(const char* title, const ArrayType& from,
                                     const NamedSharding& to, bool table) {
  ReshardEndpoint src{from.sharding, OneWorkerPerDevice(from.sharding.mesh())};
  ReshardEndpoint dst{to, OneWorkerPerDevice(to.mesh())};
  absl::StatusOr<ReshardPlan> plan = ComputeReshardPlan(from.shape, from.dtype, src, dst);
  if (!plan.ok()) {
    Print(absl::StrCat(title, ": ", plan.status().ToString(), "\n"));
    return plan;
  }
  Print(absl::StrCat(title, ": ", from.ToString(), " -> ",
                     ArrayType{from.dtype, from.shape, to, {}}.ToString(), "\n"));
  if (table) {
    Print(PlanToTable(*plan, from.dtype));
  } else {
    Print(absl::StrCat("  ", plan->NumNetworkTransfers(), " network transfers, ",
                       plan->bytes_moved, " bytes (lower bound ", plan->lower_bound_bytes,
                       "), pattern ", plan->pattern, "\n"));
  }
  return plan;
}

absl::Status LinearExample() {
  Print("== (a) nnx.Linear(32, 32) on mesh data=8, y = model(x, out_sharding=P('data'))\n\n");
  absl::StatusOr<Mesh> mesh = Mesh::Create({{"data", 8}});
  if (!mesh.ok()) return mesh.status();
  absl::StatusOr<ArrayType> kernel =
      MakeArrayType(DType::kFloat32, {32, 32}, *mesh, Spec("P(None, 'data')"));
  absl::StatusOr<ArrayType> x = MakeArrayType(DType::kFloat32, {64, 32}, *mesh, Spec("P('data')"));
  if (!kernel.ok()) return kernel.status();
  if (!x.ok()) return x.status();
  ShowType("kernel", *kernel);
  ShowType("x", *x);
  const DotDimensionNumbers dims{{1}, {0}, {}, {}};
  absl::StatusOr<ArrayType> no_out = DotGeneralRule(*x, *kernel, dims, std::nullopt);
  Print(absl::StrCat("y = x @ kernel without out_sharding: ",
                     no_out.ok() ? no_out->ToString() : no_out.status().ToString(),
                     "\n\n"));
  absl::StatusOr<ArrayType> y = DotGeneralRule(*x, *kernel, dims, Spec("P('data')"));
  if (!y.ok()) return y.status();
  ShowType("y = model(x, out_sharding=P('data'))", *y);
  Print("Each device holds 8 rows of x but only 4 columns of the kernel, so y's\n"
        "rows need the whole kernel. Two ways to get there:\n");
  absl::StatusOr<ReshardPlan> gather_kernel = ShowPlan(
      "  (1) all-gather the kernel", *kernel,
      NamedSharding::UncheckedCreate(*mesh, Spec("P(None, None)")), false);
  absl::StatusOr<ReshardPlan> gather_x = ShowPlan(
      "  (2) all-gather x", *x, NamedSharding::UncheckedCreate(*mesh, Spec("P(None, None)")),
      false);
  ArrayType y_cols{DType::kFloat32, {64, 32},
                   NamedSharding::UncheckedCreate(*mesh, Spec("P(None, 'data')")), {}};
  absl::StatusOr<ReshardPlan> y_back = ShowPlan(
      "      then move y's columns to rows", y_cols,
      NamedSharding::UncheckedCreate(*mesh, Spec("P('data', None)")), false);
  if (!gather_kernel.ok() || !gather_x.ok() || !y_back.ok()) {
    return absl::InternalError("planning failed");
  }
  const int64_t second = gather_x->bytes_moved + y_back->bytes_moved;
  Print(absl::StrCat("Cheaper by bytes: ",
                     gather_kernel->bytes_moved <= second ? "(1)" : "(2)", " (",
                     gather_kernel->bytes_moved, " vs ", second, " bytes). Its plan:\n"));
  absl::StatusOr<ReshardPlan> shown = ShowPlan(
      "  kernel", *kernel, NamedSharding::UncheckedCreate(*mesh, Spec("P(None, None)")), true);
  if (!shown.ok()) return shown.status();
  Print("\n");
  return absl::OkStatus();
}

absl::Status SwiGluExample() {
  Print("== (b) SwiGLU block, FSDP + TP, mesh fsdp=2, model=4, bfloat16\n\n");
  absl::StatusOr<Mesh> mesh = Mesh::Create({{"fsdp", 2}, {"model", 4}});
  if (!mesh.ok()) return mesh.status();
  const DType bf16 = DType::kBFloat16;
  absl::StatusOr<ArrayType> x =
      MakeArrayType(bf16, {8, 4096, 2048}, *mesh, Spec("P('fsdp', None, None)"));
  absl::StatusOr<ArrayType> w_gate =
      MakeArrayType(bf16, {2048, 8192}, *mesh, Spec("P('fsdp', 'model')"));
  absl::StatusOr<ArrayType> w_down =
      MakeArrayType(bf16, {8192, 2048}, *mesh, Spec("P('model', 'fsdp')"));
  if (!x.ok()) return x.status();
  if (!w_gate.ok()) return w_gate.status();
  if (!w_down.ok()) return w_down.status();
  Print(absl::StrCat("x:           ", x->ToString(), "\n"));
  Print(absl::StrCat("gate/up W:   ", w_gate->ToString(), "\n"));
  Print(absl::StrCat("down W:      ", w_down->ToString(), "\n"));
  const DotDimensionNumbers proj{{2}, {0}, {}, {}};
  absl::StatusOr<ArrayType> gate = DotGeneralRule(*x, *w_gate, proj, std::nullopt);
  if (!gate.ok()) return gate.status();
  Print(absl::StrCat("gate_proj(x): ", gate->ToString(), "\n"));
  Print(absl::StrCat("up_proj(x):   ", gate->ToString(), "\n"));
  absl::StatusOr<ArrayType> silu = UnaryRule("silu", *gate);
  if (!silu.ok()) return silu.status();
  absl::StatusOr<ArrayType> h = ElementwiseRule("mul", {*silu, *gate});
  if (!h.ok()) return h.status();
  Print(absl::StrCat("silu(g) * u:  ", h->ToString(), "\n"));
  absl::StatusOr<ArrayType> ambiguous = DotGeneralRule(*h, *w_down, proj, std::nullopt);
  Print(absl::StrCat("down_proj(h) without out_sharding: ",
                     ambiguous.ok() ? ambiguous->ToString() : ambiguous.status().ToString(),
                     "\n"));
  absl::StatusOr<ArrayType> out =
      DotGeneralRule(*h, *w_down, proj, Spec("P('fsdp', None, 'model')"));
  if (!out.ok()) return out.status();
  Print(absl::StrCat("down_proj(h, out_sharding=P('fsdp', None, 'model')): ",
                     out->ToString(), "\n\n"));
  // Locally, each device contracts its own 'model' slice of the hidden dim:
  // the partial sums over 'model' that the output's sharding reduces.
  absl::StatusOr<ArrayType> partial = MakeArrayType(
      bf16, {8, 4096, 2048}, *mesh, Spec("P('fsdp', None, None, unreduced={'model'})"));
  if (!partial.ok()) return partial.status();
  Print(absl::StrCat("local matmul result (partial sums): ", partial->ToString(), "\n"));
  absl::StatusOr<ReshardPlan> plan =
      ShowPlan("reduce-scatter", *partial, out->sharding, true);
  return plan.ok() ? absl::OkStatus() : plan.status();
}

int RunDemo(int argc, char** argv) {
  (void)argv;
  if (argc > 1) {
    std::fprintf(stderr, "usage: meshserve demo\n");
    return 2;
  }
  for (absl::Status status : {LinearExample(), SwiGluExample()}) {
    if (!status.ok()) {
      std::fprintf(stderr, "meshserve demo: %s\n", status.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

MS_REGISTER_COMMAND(RawCommand{
    "demo", "demo                            the seed's two examples with their reshard plans",
    {}, RunDemo});

}  // namespace
}  // namespace client
}  // namespace meshserve
