#include "server/coordinator/program_cache.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/program/ir_conv.h"
#include "server/coordinator/testing/fake_cluster.h"
#include "server/coordinator/testing/fake_model_compiler.h"
#include "server/coordinator/testing/test_models.h"
#include "server/coordinator/testing/fake_worker_client.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::StatusIs;

// mesh[data=4,model=2]; y = relu(x), x: float32[8@data,6@model].
std::shared_ptr<const ModelFile> FixedModel() {
  auto model = std::make_shared<ModelFile>();
  model->name = "fixed";
  model->mesh_axes = {{"data", 4}, {"model", 2}};
  absl::StatusOr<PartitionSpec> spec = ParsePartitionSpec("P('data', 'model')");
  EXPECT_OK(spec.status());
  model->inputs.push_back({"x", {8, 6}, *spec, DType::kFloat32});
  LayerDef y;
  y.name = "y";
  y.kind = ModelOp::kRelu;
  y.inputs = {"x"};
  model->layers.push_back(std::move(y));
  model->outputs = {"y"};
  // What the fake workers parse (the same model).
  model->json_text = kFixedModelJson;
  return model;
}

class ProgramCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = FixedModel();
    const absl::Time now = absl::Now();
    for (int i = 0; i < 2; ++i) {
      const std::string address = absl::StrCat("127.0.0.1:", 9000 + i);
      ASSERT_OK_AND_ASSIGN(int64_t id, registry_.Register(address, 2, 1 << 30, -1, now));
      workers_.push_back({id, address});
    }
    request_.model = "fixed";
    request_.inputs.push_back({"x", DType::kFloat32, {8, 6}, std::string(48 * 4, '\0')});
  }

  // A placement of generation `generation`, loaded on its (fake) workers.
  std::shared_ptr<const Placement> Place(int64_t generation) {
    absl::StatusOr<Placement> placement = ComputePlacement(*model_, workers_, generation);
    EXPECT_OK(placement.status());
    for (const auto& [id, devices] : placement->devices_by_worker) {
      LoadModelIr call;
      call.model = placement->model;
      call.generation = generation;
      call.model_json = model_->json_text;
      call.mesh = MeshToIr(placement->mesh);
      call.devices = devices;
      call.device_workers = placement->device_workers;
      EXPECT_OK(cluster_.Worker(id)->LoadModel(call, absl::ZeroDuration()).status());
    }
    return std::make_shared<const Placement>(*std::move(placement));
  }

  ValidatedRequest Validated(const InferRequest& request) {
    absl::StatusOr<ValidatedRequest> v = ValidateInferRequest(model_, request);
    EXPECT_OK(v.status());
    return *std::move(v);
  }

  FakeCluster cluster_;
  FakeModelCompiler compiler_;
  WorkerRegistry registry_{absl::Milliseconds(500), 3};
  ProgramCache cache_{&compiler_, cluster_.Factory(), &registry_, absl::Seconds(1)};
  std::shared_ptr<const ModelFile> model_;
  std::vector<PlacementWorker> workers_;
  InferRequest request_;
};

TEST_F(ProgramCacheTest, CompilesAndInstallsOncePerKey) {
  std::shared_ptr<const Placement> placement = Place(1);
  const ValidatedRequest v = Validated(request_);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const CompiledPlan> first,
                       cache_.GetOrCompile(v, placement));
  EXPECT_EQ(first->generation, 1);
  EXPECT_EQ(first->program_id.rfind("fixed/g1/p", 0), 0u) << first->program_id;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(std::shared_ptr<const CompiledPlan> again,
                         cache_.GetOrCompile(v, placement));
    EXPECT_EQ(again, first);
  }
  EXPECT_EQ(compiler_.compiles(), 1);
  EXPECT_EQ(cache_.size(), 1u);
  for (const PlacementWorker& w : workers_) {
    EXPECT_EQ(cluster_.Worker(w.worker_id)->install_calls(), 1) << "worker " << w.worker_id;
  }
}

TEST_F(ProgramCacheTest, OtherOutShardingsAreAnotherProgram) {
  std::shared_ptr<const Placement> placement = Place(1);
  ASSERT_OK(cache_.GetOrCompile(Validated(request_), placement).status());
  InferRequest replicated = request_;
  replicated.out_shardings["y"] = "P()";
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const CompiledPlan> plan,
                       cache_.GetOrCompile(Validated(replicated), placement));
  EXPECT_EQ(compiler_.compiles(), 2);
  EXPECT_EQ(cache_.size(), 2u);
  EXPECT_EQ(plan->outputs.at(0).type_str, "float32[8,6]");
}

TEST_F(ProgramCacheTest, ConcurrentRequestsShareOneCompile) {
  std::shared_ptr<const Placement> placement = Place(1);
  const ValidatedRequest v = Validated(request_);
  std::vector<std::shared_ptr<const CompiledPlan>> plans(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < plans.size(); ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<std::shared_ptr<const CompiledPlan>> plan = cache_.GetOrCompile(v, placement);
      if (plan.ok()) plans[i] = *plan;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(compiler_.compiles(), 1);
  for (const auto& plan : plans) EXPECT_EQ(plan, plans[0]);
  EXPECT_NE(plans[0], nullptr);
}

TEST_F(ProgramCacheTest, LostWorkerDuringInstallIsUnavailableAndNotCached) {
  std::shared_ptr<const Placement> placement = Place(1);
  const int64_t lost = workers_[1].worker_id;
  cluster_.Worker(lost)->SetDown(true);
  const ValidatedRequest v = Validated(request_);
  EXPECT_THAT(cache_.GetOrCompile(v, placement),
              StatusIs(absl::StatusCode::kUnavailable,
                       absl::StrCat("InstallProgram on worker ", lost)));
  EXPECT_TRUE(registry_.IsSuspect(lost));
  EXPECT_FALSE(registry_.IsSuspect(workers_[0].worker_id));
  EXPECT_EQ(cache_.size(), 0u);
  cluster_.Worker(lost)->SetDown(false);
  ASSERT_OK(cache_.GetOrCompile(v, placement).status());
  EXPECT_EQ(compiler_.compiles(), 2) << "the failed install was not cached";
}

TEST_F(ProgramCacheTest, OtherInstallErrorsKeepTheirCode) {
  std::shared_ptr<const Placement> placement = Place(1);
  const int64_t w1 = workers_[1].worker_id;
  ASSERT_OK(cluster_.Worker(w1)->UnloadModel("fixed", 1, 0, absl::ZeroDuration()));
  EXPECT_THAT(cache_.GetOrCompile(Validated(request_), placement),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       absl::StrCat("InstallProgram on worker ", w1)));
  EXPECT_FALSE(registry_.IsSuspect(w1));
  EXPECT_EQ(cache_.size(), 0u);
}

TEST_F(ProgramCacheTest, CompileErrorIsNotCached) {
  std::shared_ptr<const Placement> placement = Place(1);
  InferRequest bad = request_;
  bad.out_shardings["y"] = "P('nope')";
  const ValidatedRequest v = Validated(bad);
  EXPECT_THAT(cache_.GetOrCompile(v, placement),
              StatusIs(absl::StatusCode::kInvalidArgument, "nope"));
  EXPECT_EQ(cache_.size(), 0u);
  EXPECT_FALSE(cache_.GetOrCompile(v, placement).ok());
  EXPECT_EQ(compiler_.compiles(), 2);
  for (const PlacementWorker& w : workers_) {
    EXPECT_EQ(cluster_.Worker(w.worker_id)->install_calls(), 0);
  }
}

TEST_F(ProgramCacheTest, EraseGenerationDropsOnlyItsPlans) {
  std::shared_ptr<const Placement> g1 = Place(1);
  std::shared_ptr<const Placement> g2 = Place(2);
  const ValidatedRequest v = Validated(request_);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const CompiledPlan> on_g1, cache_.GetOrCompile(v, g1));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const CompiledPlan> on_g2, cache_.GetOrCompile(v, g2));
  EXPECT_NE(on_g1->program_id, on_g2->program_id);
  EXPECT_EQ(on_g2->generation, 2);
  EXPECT_EQ(cache_.size(), 2u);
  cache_.EraseGeneration("fixed", 1);
  EXPECT_EQ(cache_.size(), 1u);
  ASSERT_OK(cache_.GetOrCompile(v, g2).status());
  EXPECT_EQ(compiler_.compiles(), 2) << "generation 2 is still cached";
}

TEST_F(ProgramCacheTest, FindReturnsOnlyWhatIsCompiledAndInstalled) {
  std::shared_ptr<const Placement> g1 = Place(1);
  std::shared_ptr<const Placement> g2 = Place(2);
  const ValidatedRequest v = Validated(request_);
  EXPECT_EQ(cache_.Find(v, *g1), nullptr);  // never compiled
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const CompiledPlan> plan, cache_.GetOrCompile(v, g1));
  EXPECT_EQ(cache_.Find(v, *g1), plan);
  EXPECT_EQ(cache_.Find(v, *g2), nullptr);  // another generation, another plan
  InferRequest replicated = request_;
  replicated.out_shardings["y"] = "P()";
  EXPECT_EQ(cache_.Find(Validated(replicated), *g1), nullptr);  // another key
  // A failed install leaves nothing to find.
  cluster_.Worker(workers_[1].worker_id)->SetDown(true);
  EXPECT_FALSE(cache_.GetOrCompile(v, g2).ok());
  EXPECT_EQ(cache_.Find(v, *g2), nullptr);
  cache_.EraseGeneration("fixed", 1);
  EXPECT_EQ(cache_.Find(v, *g1), nullptr);
  EXPECT_EQ(compiler_.compiles(), 2) << "Find compiles nothing";
}

// Three keys of one placement: out_shardings the mesh accepts for y.
InferRequest WithOutSharding(InferRequest request, const std::string& spec) {
  if (!spec.empty()) request.out_shardings["y"] = spec;
  return request;
}

class BoundedProgramCacheTest : public ProgramCacheTest {
 protected:
  ProgramCacheOptions Options() {
    ProgramCacheOptions options;
    options.max_programs = 2;
    options.metrics = &metrics_;
    options.on_evict = [this](std::shared_ptr<const CompiledPlan> plan) {
      absl::MutexLock lock(&evicted_mu_);  // called on the requests' threads
      evicted_.push_back(plan->program_id);
    };
    return options;
  }

  MetricRegistry metrics_;
  absl::Mutex evicted_mu_;
  std::vector<std::string> evicted_;  // read after the requests are done
  ProgramCache bounded_{&compiler_, cluster_.Factory(), &registry_, absl::Seconds(1), Options()};
};

TEST_F(BoundedProgramCacheTest, EvictsTheLeastRecentlyUsedAndRecompilesItOnRequest) {
  std::shared_ptr<const Placement> placement = Place(1);
  const ValidatedRequest a = Validated(request_);
  const ValidatedRequest b = Validated(WithOutSharding(request_, "P()"));
  const ValidatedRequest c = Validated(WithOutSharding(request_, "P('data', None)"));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const CompiledPlan> plan_a,
                       bounded_.GetOrCompile(a, placement));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const CompiledPlan> plan_b,
                       bounded_.GetOrCompile(b, placement));
  ASSERT_OK(bounded_.GetOrCompile(a, placement).status());  // a hit: a is newer than b
  ASSERT_OK(bounded_.GetOrCompile(c, placement).status());
  EXPECT_EQ(compiler_.compiles(), 3);
  EXPECT_EQ(bounded_.size(), 2u);
  EXPECT_EQ(bounded_.evictions(), 1);
  EXPECT_EQ(evicted_, std::vector<std::string>{plan_b->program_id});
  EXPECT_EQ(bounded_.Find(b, *placement), nullptr);
  EXPECT_EQ(bounded_.Find(a, *placement), plan_a);
  EXPECT_NE(bounded_.Find(c, *placement), nullptr);

  // b again: compiled and installed again, under its old program id; the
  // least recently used (a: Find above touched a, then c) goes.
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const CompiledPlan> again_b,
                       bounded_.GetOrCompile(b, placement));
  EXPECT_EQ(compiler_.compiles(), 4);
  EXPECT_NE(again_b, plan_b);
  EXPECT_EQ(again_b->program_id, plan_b->program_id);
  EXPECT_EQ(evicted_, (std::vector<std::string>{plan_b->program_id, plan_a->program_id}));
  EXPECT_EQ(bounded_.size(), 2u);
  for (const PlacementWorker& w : workers_) {
    EXPECT_EQ(cluster_.Worker(w.worker_id)->install_calls(), 4) << "worker " << w.worker_id;
  }
  const std::string text = metrics_.Exposition();
  EXPECT_THAT(text, ::testing::HasSubstr("meshserve_program_cache_programs 2\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("meshserve_program_cache_evictions_total 2\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("meshserve_program_cache_compiles_total 4\n"));
}

TEST_F(BoundedProgramCacheTest, FindCountsAsAUse) {
  std::shared_ptr<const Placement> placement = Place(1);
  const ValidatedRequest a = Validated(request_);
  const ValidatedRequest b = Validated(WithOutSharding(request_, "P()"));
  const ValidatedRequest c = Validated(WithOutSharding(request_, "P(None, 'model')"));
  ASSERT_OK(bounded_.GetOrCompile(a, placement).status());
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const CompiledPlan> plan_b,
                       bounded_.GetOrCompile(b, placement));
  ASSERT_NE(bounded_.Find(a, *placement), nullptr);
  ASSERT_OK(bounded_.GetOrCompile(c, placement).status());
  EXPECT_EQ(evicted_, std::vector<std::string>{plan_b->program_id});
  EXPECT_NE(bounded_.Find(a, *placement), nullptr);
  EXPECT_EQ(bounded_.Find(b, *placement), nullptr);
}

TEST_F(BoundedProgramCacheTest, EraseGenerationFreesRoomWithoutEvicting) {
  std::shared_ptr<const Placement> g1 = Place(1);
  std::shared_ptr<const Placement> g2 = Place(2);
  const ValidatedRequest a = Validated(request_);
  const ValidatedRequest b = Validated(WithOutSharding(request_, "P()"));
  ASSERT_OK(bounded_.GetOrCompile(a, g1).status());
  ASSERT_OK(bounded_.GetOrCompile(b, g1).status());
  bounded_.EraseGeneration("fixed", 1);
  EXPECT_EQ(bounded_.size(), 0u);
  EXPECT_THAT(metrics_.Exposition(),
              ::testing::HasSubstr("meshserve_program_cache_programs 0\n"));
  ASSERT_OK(bounded_.GetOrCompile(a, g2).status());
  ASSERT_OK(bounded_.GetOrCompile(b, g2).status());
  EXPECT_EQ(bounded_.evictions(), 0);
  EXPECT_TRUE(evicted_.empty());
}

TEST_F(BoundedProgramCacheTest, SameKeySameProgramIdOtherKeysOtherIds) {
  std::shared_ptr<const Placement> g1 = Place(1);
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const CompiledPlan> a,
                       bounded_.GetOrCompile(Validated(request_), g1));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const CompiledPlan> b,
                       bounded_.GetOrCompile(Validated(WithOutSharding(request_, "P()")), g1));
  EXPECT_NE(a->program_id, b->program_id);
  EXPECT_EQ(a->program_id.rfind("fixed/g1/p", 0), 0u) << a->program_id;
  EXPECT_EQ(a->program_id.size(), std::string("fixed/g1/p").size() + 16) << a->program_id;
}

TEST_F(BoundedProgramCacheTest, ConcurrentRequestsOverTheBoundKeepEveryPlanAccounted) {
  std::shared_ptr<const Placement> placement = Place(1);
  const std::vector<ValidatedRequest> keys = {
      Validated(request_), Validated(WithOutSharding(request_, "P()")),
      Validated(WithOutSharding(request_, "P('data', None)")),
      Validated(WithOutSharding(request_, "P(None, 'model')"))};
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const ValidatedRequest& v = keys[(t + i) % keys.size()];
        absl::StatusOr<std::shared_ptr<const CompiledPlan>> plan =
            bounded_.GetOrCompile(v, placement);
        if (!plan.ok() || *plan == nullptr) failures.fetch_add(1);
        bounded_.Find(v, *placement);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(bounded_.size(), 2u);
  // Every plan compiled (and installed: nothing failed) is cached or evicted.
  EXPECT_EQ(bounded_.evictions() + 2, compiler_.compiles());
  EXPECT_EQ(static_cast<int>(evicted_.size()), bounded_.evictions());
}

}  // namespace
}  // namespace meshserve
