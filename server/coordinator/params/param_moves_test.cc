#include "server/coordinator/params/param_moves.h"

#include <algorithm>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/base/dtype.h"
#include "common/program/ir_conv.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::HasSubstr;

ParamDef Param(const std::string& name, std::vector<int64_t> shape, const std::string& spec,
               DType dtype = DType::kFloat32) {
  ParamDef p;
  p.name = name;
  p.shape = std::move(shape);
  absl::StatusOr<PartitionSpec> parsed = ParsePartitionSpec(spec);
  EXPECT_OK(parsed.status());
  p.sharding = *parsed;
  p.dtype = dtype;
  return p;
}

// Params over mesh axes 'data' (any size) and 'model' (size 2 or absent).
ModelFile TestModel(bool with_model_axis) {
  ModelFile m;
  m.name = "m";
  m.params.push_back(Param("rows", {8, 12}, "P('data', None)"));
  m.params.push_back(Param("cols", {10, 6}, "P(None, 'data')"));  // uneven shards
  m.params.push_back(Param("rep", {6}, "P()", DType::kBFloat16));
  m.params.push_back(Param("scalar", {}, "P()", DType::kInt64));
  if (with_model_axis) m.params.push_back(Param("grid", {8, 12}, "P('data', 'model')"));
  return m;
}

Mesh MakeMesh(int64_t data, bool model_axis) {
  std::vector<MeshAxis> axes = {{"data", data}};
  if (model_axis) axes.push_back({"model", 2});
  absl::StatusOr<Mesh> mesh = Mesh::Create(axes);
  EXPECT_OK(mesh.status());
  return *mesh;
}

// Devices dealt in contiguous blocks as ComputePlacement does, replicas as
// placement.h describes.
Placement MakePlacement(const std::vector<int64_t>& ids, const Mesh& mesh, bool replicas,
                        int64_t generation) {
  Placement p;
  p.model = "m";
  p.generation = generation;
  p.mesh = mesh;
  const int64_t d_count = mesh.num_devices();
  const int64_t used = std::min<int64_t>(static_cast<int64_t>(ids.size()), d_count);
  for (int64_t d = 0; d < d_count; ++d) {
    const int64_t id = ids[d * used / d_count];
    p.device_workers.push_back(id);
    p.devices_by_worker[id].push_back(d);
    p.worker_addresses[id] = absl::StrCat("w", id);
  }
  const std::vector<int64_t> w = p.WorkerIds();
  if (replicas && w.size() >= 2) {
    for (size_t i = 0; i < w.size(); ++i) {
      p.replica_devices_by_worker[w[i]] = p.devices_by_worker.at(w[(i + 1) % w.size()]);
    }
  }
  return p;
}

std::vector<int64_t> HeldDevices(const Placement& p, int64_t id) {
  std::vector<int64_t> d = p.devices_by_worker.at(id);
  for (int64_t r : p.ReplicaDevices(id)) d.push_back(r);
  return d;
}

bool InAny(const std::vector<Box>& boxes, const std::vector<int64_t>& index) {
  for (const Box& b : boxes) {
    bool in = true;
    for (int d = 0; d < b.rank(); ++d) in = in && b[d].Contains(index[d]);
    if (in) return true;
  }
  return false;
}

// Every index of `box`, row-major.
std::vector<std::vector<int64_t>> Indices(const Box& box) {
  std::vector<std::vector<int64_t>> out;
  if (box.IsEmpty()) return out;
  std::vector<int64_t> i(box.rank());
  for (int d = 0; d < box.rank(); ++d) i[d] = box[d].begin;
  while (true) {
    out.push_back(i);
    int d = box.rank() - 1;
    while (d >= 0 && ++i[d] == box[d].end) {
      i[d] = box[d].begin;
      --d;
    }
    if (d < 0) return out;
  }
}

struct Expected {
  int64_t lacked = 0, local = 0, initialized = 0;
};

// The stats by element counting, independent of the planner; checks the
// plan's pieces as it goes.
Expected CheckPlan(const ModelFile& model, const std::vector<ParamHolding>& old,
                   const Placement& next, const ParamMovePlan& plan) {
  Expected e;
  for (const ParamDef& param : model.params) {
    const int64_t elem = DTypeSize(param.dtype);
    std::map<int64_t, std::vector<Box>> old_cells;  // live worker -> cells
    std::vector<Box> all_live;
    for (const ParamHolding& h : old) {
      if (!h.live) continue;
      std::vector<int64_t> held = h.devices;
      held.insert(held.end(), h.replica_devices.begin(), h.replica_devices.end());
      absl::StatusOr<std::vector<Box>> cells = HeldCells(param, h.mesh, held);
      EXPECT_OK(cells.status());
      for (const Box& c : *cells) {
        old_cells[h.worker_id].push_back(c);
        all_live.push_back(c);
      }
    }
    for (int64_t id : next.WorkerIds()) {
      absl::StatusOr<std::vector<Box>> cells = HeldCells(param, next.mesh, HeldDevices(next, id));
      EXPECT_OK(cells.status());
      if (!cells.ok()) continue;
      for (const Box& cell : *cells) {
        std::vector<ParamPieceIr> pieces;
        for (const ParamPieceIr& p : plan.sources.at(id)) {
          if (p.param == param.name && !Intersect(UncheckedBoxFromIr(p.box), cell).IsEmpty()) {
            pieces.push_back(p);
          }
        }
        bool all_held = true;
        int64_t lacked = 0;
        for (const auto& index : Indices(cell)) {
          all_held = all_held && InAny(all_live, index);
          if (!InAny(old_cells[id], index)) ++lacked;
        }
        if (!all_held) {
          EXPECT_TRUE(pieces.empty()) << param.name << " cell " << cell << " on " << id;
          e.initialized += cell.NumElements() * elem;
          continue;
        }
        e.lacked += lacked * elem;
        e.local += (cell.NumElements() - lacked) * elem;
        // The pieces tile the cell, and each comes from a holder of it.
        std::map<std::vector<int64_t>, int> count;
        for (const ParamPieceIr& p : pieces) {
          const Box box = UncheckedBoxFromIr(p.box);
          EXPECT_TRUE(cell.Contains(box)) << box << " in " << cell;
          const auto& src = old_cells[p.src_worker];
          for (const auto& index : Indices(box)) {
            ++count[index];
            EXPECT_TRUE(InAny(src, index)) << "worker " << p.src_worker << " lacks " << box;
            if (p.src_worker != id) {
              EXPECT_FALSE(InAny(old_cells[id], index)) << "moved what " << id << " held";
            }
          }
          bool holding_matches = false;
          for (const ParamHolding& h : old) {
            holding_matches = holding_matches ||
                              (h.live && h.worker_id == p.src_worker &&
                               h.generation == p.src_generation && h.version == p.src_version);
          }
          EXPECT_TRUE(holding_matches);
        }
        EXPECT_EQ(static_cast<int64_t>(count.size()), cell.NumElements()) << cell;
        for (const auto& [index, n] : count) EXPECT_EQ(n, 1);
      }
    }
  }
  return e;
}

TEST(ParamMovesTest, FirstLoadInitialisesEverything) {
  const ModelFile model = TestModel(false);
  const Placement next = MakePlacement({0, 1}, MakeMesh(4, false), true, 1);
  ASSERT_OK_AND_ASSIGN(ParamMovePlan plan, PlanParamMoves(model, {}, next, false));
  EXPECT_TRUE(plan.sources.at(0).empty());
  EXPECT_TRUE(plan.sources.at(1).empty());
  EXPECT_EQ(plan.stats.bytes_moved, 0);
  Expected e = CheckPlan(model, {}, next, plan);
  EXPECT_EQ(plan.stats.bytes_initialized, e.initialized);
  EXPECT_GT(e.initialized, 0);
}

TEST(ParamMovesTest, SameLayoutIsAllLocal) {
  const ModelFile model = TestModel(true);
  const Placement old = MakePlacement({0, 1, 2}, MakeMesh(3, true), true, 1);
  Placement next = old;
  next.generation = 2;
  ASSERT_OK_AND_ASSIGN(ParamMovePlan plan, PlanParamMoves(model, HoldingsOf(old), next, true));
  EXPECT_EQ(plan.stats.bytes_moved, 0);
  EXPECT_EQ(plan.stats.bytes_initialized, 0);
  EXPECT_GT(plan.stats.bytes_local, 0);
  for (const auto& [id, pieces] : plan.sources) {
    for (const ParamPieceIr& p : pieces) EXPECT_EQ(p.src_worker, id);
  }
}

TEST(ParamMovesTest, SpreadsReadsOverHolders) {
  // Cell A = rows[0:4] on workers 0 (primary) and 1 (replica), B = rows[4:8]
  // on 1 and 0; new workers 2 and 3 need one each.
  ModelFile model;
  model.params.push_back(Param("rows", {8, 12}, "P('data', None)"));
  const Placement old = MakePlacement({0, 1}, MakeMesh(2, false), true, 1);
  const Placement next = MakePlacement({2, 3}, MakeMesh(2, false), false, 2);
  ASSERT_OK_AND_ASSIGN(ParamMovePlan plan, PlanParamMoves(model, HoldingsOf(old), next, true));
  ASSERT_EQ(plan.sources.at(2).size(), 1u);
  ASSERT_EQ(plan.sources.at(3).size(), 1u);
  EXPECT_NE(plan.sources.at(2)[0].src_worker, plan.sources.at(3)[0].src_worker);
  EXPECT_EQ(plan.stats.bytes_moved, 8 * 12 * 4);
  EXPECT_EQ(plan.stats.lower_bound_bytes, 8 * 12 * 4);
}

TEST(ParamMovesTest, LostBoxOfPushedModelIsDataLoss) {
  ModelFile model;
  model.params.push_back(Param("rows", {8, 12}, "P('data', None)"));
  const Placement old = MakePlacement({0, 1}, MakeMesh(2, false), false, 1);
  std::vector<ParamHolding> holdings = HoldingsOf(old);
  for (ParamHolding& h : holdings) h.version = 3;
  holdings[1].live = false;  // worker 1 died, no replicas
  const Placement next = MakePlacement({0}, MakeMesh(2, false), false, 2);
  EXPECT_THAT(PlanParamMoves(model, holdings, next, true),
              StatusIs(absl::StatusCode::kDataLoss, ("param rows box [4:8, 0:12] lost with worker 1; version 3 "
                                 "cannot be rebuilt")));
  // Never pushed: the lost cell is initialised again, the rest moves.
  ASSERT_OK_AND_ASSIGN(ParamMovePlan plan, PlanParamMoves(model, holdings, next, false));
  EXPECT_EQ(plan.stats.bytes_initialized, 4 * 12 * 4);
  EXPECT_EQ(plan.stats.bytes_local, 4 * 12 * 4);
}

TEST(ParamMovesTest, ReplicaSurvivesAWorkerDeath) {
  ModelFile model;
  model.params.push_back(Param("rows", {8, 12}, "P('data', None)"));
  const Placement old = MakePlacement({0, 1, 2}, MakeMesh(3, false), true, 1);
  std::vector<ParamHolding> holdings = HoldingsOf(old);
  holdings[2].live = false;
  const Placement next = MakePlacement({0, 1}, MakeMesh(2, false), true, 2);
  ASSERT_OK_AND_ASSIGN(ParamMovePlan plan, PlanParamMoves(model, holdings, next, true));
  EXPECT_EQ(plan.stats.bytes_initialized, 0);
  Expected e = CheckPlan(model, holdings, next, plan);
  EXPECT_EQ(plan.stats.bytes_moved, e.lacked);
}

TEST(ParamMovesTest, RandomScaleStepsMoveExactlyTheLowerBound) {
  std::mt19937 rng(8);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int cases = 0;
  for (int iter = 0; iter < 300; ++iter) {
    const bool model_axis = pick(0, 1) == 1;
    const ModelFile model = TestModel(model_axis);
    auto workers = [&](int n) {
      std::vector<int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
      std::shuffle(all.begin(), all.end(), rng);
      all.resize(n);
      std::sort(all.begin(), all.end());
      return all;
    };
    const std::vector<int64_t> old_ids = workers(pick(1, 8));
    const std::vector<int64_t> new_ids = workers(pick(1, 8));
    const int64_t old_data = pick(1, 8);
    const int64_t new_data = pick(1, 8);
    const Placement old =
        MakePlacement(old_ids, MakeMesh(old_data, model_axis), pick(0, 1) == 1, 1);
    const Placement next =
        MakePlacement(new_ids, MakeMesh(new_data, model_axis), pick(0, 1) == 1, 2);
    std::vector<ParamHolding> holdings = HoldingsOf(old);
    bool any_dead = false;
    for (ParamHolding& h : holdings) {
      if (!next.devices_by_worker.count(h.worker_id) && pick(0, 3) == 0) {
        h.live = false;
        any_dead = true;
      }
    }
    ASSERT_OK_AND_ASSIGN(ParamMovePlan plan, PlanParamMoves(model, holdings, next, false));
    const Expected e = CheckPlan(model, holdings, next, plan);
    EXPECT_EQ(plan.stats.bytes_moved, e.lacked) << old.ToString() << " -> " << next.ToString();
    EXPECT_EQ(plan.stats.lower_bound_bytes, e.lacked);
    EXPECT_EQ(plan.stats.bytes_local, e.local);
    EXPECT_EQ(plan.stats.bytes_initialized, e.initialized);
    if (!any_dead) {
      EXPECT_EQ(plan.stats.bytes_initialized, 0);
    }
    // Pushed: the same plan, or kDataLoss exactly when something is lost.
    absl::StatusOr<ParamMovePlan> pushed = PlanParamMoves(model, holdings, next, true);
    if (e.initialized == 0) {
      ASSERT_OK(pushed.status());
      EXPECT_EQ(pushed->stats.bytes_moved, plan.stats.bytes_moved);
    } else {
      EXPECT_THAT(pushed, StatusIs(absl::StatusCode::kDataLoss, ("lost with worker")));
    }
    ++cases;
  }
  EXPECT_EQ(cases, 300);
}

}  // namespace
}  // namespace meshserve
