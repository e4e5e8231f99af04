// CoordinatorGenerationBackend and its step executor (coordinator_backend.h).
#include "server/coordinator/generate/coordinator_backend.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/model/typed_model.h"
#include "common/sharding/rules/decode_ops.h"
#include "common/sharding/rules/rule_util.h"
#include "server/compiler/decode_model.h"
#include "server/coordinator/fan_out.h"

namespace meshserve {
namespace {

// The bytes of one KV block on one device of `placement`: typed on its mesh,
// each attention layer's keys hold kv_heads / (their head shards) heads.
absl::StatusOr<int64_t> BlockBytes(const ModelFile& model, const Placement& placement,
                                   int64_t block_tokens) {
  MS_ASSIGN_OR_RETURN(ModelFile variant, DecodeVariant(model, 1, 1));
  MS_ASSIGN_OR_RETURN(LmShape lm, InspectLm(model));
  MS_ASSIGN_OR_RETURN(TypedModel typed,
                      TypeModel(variant, placement.mesh, {{lm.input, {1, 1}}}));
  int64_t per_token = 0;
  for (const LayerDef& l : variant.layers) {
    if (l.kind != ModelOp::kAttention) continue;
    const ArrayType& k = typed.types.at(l.inputs[1]);
    const int64_t shards = rules::EntrySize(typed.mesh, k.spec().entry(2));
    per_token += 2 * (k.shape[2] / std::max<int64_t>(shards, 1)) * k.shape[3] * 4;
  }
  return per_token * block_tokens;
}

// One row of the sample records (common/sharding/rules/decode_ops.h): the
// token id, its logprob, then up to kMaxLogprobs (id, logprob) pairs, the
// unlisted ones with id -1. Ids ride as floats: exact below 2^24.
SampledToken SampledFromRecord(SequenceId seq, const float* row) {
  SampledToken t{seq, static_cast<int64_t>(row[0]), row[1], {}};
  for (int64_t i = 0; 3 + 2 * i < kSampleRecordWidth; ++i) {
    if (row[2 + 2 * i] < 0) break;
    t.top_logprobs.push_back({static_cast<int64_t>(row[2 + 2 * i]), row[3 + 2 * i]});
  }
  return t;
}

constexpr absl::Duration kReleaseTimeout = absl::Seconds(10);

class CoordinatorStepExecutor : public StepExecutor {
 public:
  CoordinatorStepExecutor(Coordinator* coordinator, CoordinatorGenerationBackend* backend,
                          std::string model, std::shared_ptr<const ModelFile> file, LmShape lm,
                          int64_t max_token_slots)
      : coordinator_(coordinator), backend_(backend), model_(std::move(model)),
        file_(std::move(file)), lm_(std::move(lm)), max_token_slots_(max_token_slots) {}

  absl::StatusOr<std::vector<SampledToken>> RunStep(const StepPlan& plan) override {
    pending_release_.insert(pending_release_.end(), plan.release.begin(), plan.release.end());
    // The forks ride the step's first batch (the workers run them before its
    // releases and spans); a failed step's are not sent again (the scheduler
    // rebuilds those caches).
    pending_forks_.clear();
    for (const StepFork& fork : plan.forks) {
      pending_forks_.push_back({fork.src, fork.dsts, fork.num_tokens});
    }
    // The placement NumBlocks read for this step (the loop asks it first);
    // read here only when it did not. Dropped after the step: a retired
    // placement must not be held by an idle executor.
    std::shared_ptr<const Placement> placement = std::move(step_placement_);
    step_placement_.reset();
    if (placement == nullptr) {
      MS_ASSIGN_OR_RETURN(ModelStatus status, coordinator_->GetModelStatus(model_));
      placement = status.placement;
    }
    if (placement == nullptr) return Unavailable("model '", model_, "' is not placed");
    const Mesh& mesh = placement->mesh;
    std::vector<SampledToken> tokens;
    if (plan.release_only()) {
      // Nothing else runs: the releases go now, so a cancelled last
      // sequence's blocks are freed on the workers at once rather than with
      // the next request: a ReleaseSequences call to each worker (no program
      // runs), or, where workers do not offer it, a step of one padding
      // token (no span).
      absl::Status released = ReleaseOnWorkers(*placement);
      if (!absl::IsUnimplemented(released)) {
        MS_RETURN_IF_ERROR(released);
        return tokens;
      }
      MS_RETURN_IF_ERROR(RunBatch(plan.step, StepBatch{}, mesh, &tokens));
      return tokens;
    }
    if (plan.batches.empty()) {  // forks alone: they ride a padding step
      MS_RETURN_IF_ERROR(RunBatch(plan.step, StepBatch{}, mesh, &tokens));
    }
    for (const StepBatch& batch : plan.batches) {
      MS_RETURN_IF_ERROR(RunBatch(plan.step, batch, mesh, &tokens));
    }
    return tokens;
  }

  // The workers copy caches (DecodeStep.forks, KvCacheStore::Fork).
  bool CanFork() const override { return true; }

  // A lost worker or a model being placed anew: the coordinator recovers.
  bool MayRecover(const absl::Status& failure) const override {
    return IsRecoverableStepFailure(failure);
  }

  // The blocks of the current placement (computed once per placement); the
  // step that follows runs on that placement's mesh (one GetModelStatus per
  // step).
  int64_t NumBlocks() override {
    absl::StatusOr<ModelStatus> status = coordinator_->GetModelStatus(model_);
    if (!status.ok() || status->placement == nullptr) return 0;
    step_placement_ = status->placement;
    if (placement_.lock() != status->placement) {
      absl::StatusOr<CoordinatorGenerationBackend::KvBlocks> blocks =
          backend_->KvBlocksOf(model_, *status);
      if (!blocks.ok()) return 0;
      placement_ = status->placement;
      num_blocks_ = blocks->num_blocks;
    }
    return num_blocks_;
  }

 private:
  struct KeyedVariant {
    std::shared_ptr<const ModelFile> file;
    std::string key;  // "decode:<slots>x<rows>@<mesh>"
  };

  // The variant for the step's mesh (its LM head sharded over it:
  // decode_model.h), built once per (slots, rows, mesh); a new mesh drops the
  // old mesh's variants.
  absl::StatusOr<KeyedVariant> Variant(int64_t slots, int64_t rows, const Mesh& mesh) {
    std::string key = absl::StrCat("decode:", slots, "x", rows, "@", mesh.ToString());
    if (mesh.ToString() != variants_mesh_) {
      variants_.clear();
      variants_mesh_ = mesh.ToString();
    }
    auto it = variants_.find(key);
    if (it != variants_.end()) return KeyedVariant{it->second, std::move(key)};
    MS_ASSIGN_OR_RETURN(ModelFile variant, DecodeVariant(*file_, slots, rows, &mesh));
    auto shared = std::make_shared<const ModelFile>(std::move(variant));
    variants_.emplace(key, shared);
    return KeyedVariant{std::move(shared), std::move(key)};
  }

  absl::Status RunBatch(int64_t step, const StepBatch& batch, const Mesh& mesh,
                        std::vector<SampledToken>* tokens) {
    auto decode = std::make_shared<DecodeStepIr>();
    decode->step = step;
    decode->release.swap(pending_release_);
    decode->forks.swap(pending_forks_);  // the first batch's
    std::vector<int64_t> ids;
    std::vector<SequenceId> sampled;
    for (const StepSpan& span : batch.spans) {
      decode->spans.push_back({span.seq, span.past_len,
                               static_cast<int64_t>(span.token_ids.size()), span.sample,
                               span.sampling});
      ids.insert(ids.end(), span.token_ids.begin(), span.token_ids.end());
      if (span.sample) sampled.push_back(span.seq);
    }
    const int64_t slots = BucketOf(static_cast<int64_t>(ids.size()));
    const int64_t rows = std::min(slots, BucketOf(std::max<int64_t>(sampled.size(), 1)));
    if (slots > max_token_slots_) {
      return Internal("step ", step, " packs ", ids.size(), " tokens, past the largest bucket ",
                      max_token_slots_);
    }
    MS_ASSIGN_OR_RETURN(KeyedVariant variant, Variant(slots, rows, mesh));
    InferRequest request;
    request.model = model_;
    request.id = absl::StrCat("gen", step);
    request.variant = std::move(variant.file);
    request.variant_key = std::move(variant.key);
    request.decode = decode;
    request.param_version = batch.version;
    NamedTensor input;
    input.name = lm_.input;
    input.dtype = file_->inputs[0].dtype;
    input.shape = {1, slots};
    ids.resize(slots, 0);
    if (input.dtype == DType::kInt32) {
      std::vector<int32_t> narrow(ids.begin(), ids.end());
      input.bytes.assign(reinterpret_cast<const char*>(narrow.data()), narrow.size() * 4);
    } else {
      input.bytes.assign(reinterpret_cast<const char*>(ids.data()), ids.size() * 8);
    }
    request.inputs.push_back(std::move(input));
    absl::StatusOr<InferResponse> answered = coordinator_->Infer(request);
    if (!answered.ok()) {
      // The releases may not have reached every worker: they go again with
      // the next batch (freeing an unknown sequence is a no-op).
      pending_release_.insert(pending_release_.end(), decode->release.begin(),
                              decode->release.end());
      return answered.status();
    }
    InferResponse& response = *answered;
    if (response.outputs.size() != 1 ||
        response.outputs[0].tensor.bytes.size() !=
            static_cast<size_t>(rows * kSampleRecordWidth * sizeof(float))) {
      return Internal("step ", step, ": the decode program answered ", response.outputs.size(),
                      " outputs");
    }
    const float* rec = reinterpret_cast<const float*>(response.outputs[0].tensor.bytes.data());
    for (size_t r = 0; r < sampled.size(); ++r) {
      const float* row = rec + r * kSampleRecordWidth;
      if (row[0] < 0) return Internal("step ", step, ": row ", r, " was not sampled");
      tokens->push_back(SampledFromRecord(sampled[r], row));
    }
    return absl::OkStatus();
  }

  // Frees pending_release_ on every worker of `placement`, all at once
  // (WorkerClient::ReleaseSequences over the coordinator's connections). On
  // an error the releases stay pending (freeing an unknown sequence is a
  // no-op).
  // \error kUnimplemented when a worker does not offer it; the workers'
  //   errors (the first).
  absl::Status ReleaseOnWorkers(const Placement& placement) {
    std::vector<int64_t> ids;
    for (const auto& [worker_id, address] : placement.worker_addresses) ids.push_back(worker_id);
    const std::vector<absl::Status> results = ParallelCall(ids, [&](int64_t id) {
      absl::StatusOr<std::shared_ptr<WorkerClient>> client =
          coordinator_->WorkerClientFor(id, placement.worker_addresses.at(id));
      if (!client.ok()) return client.status();
      return (*client)->ReleaseSequences(model_, placement.generation, pending_release_,
                                         kReleaseTimeout);
    });
    for (const absl::Status& result : results) {
      if (absl::IsUnimplemented(result)) return result;
    }
    for (const absl::Status& result : results) MS_RETURN_IF_ERROR(result);
    pending_release_.clear();
    return absl::OkStatus();
  }

  Coordinator* const coordinator_;
  CoordinatorGenerationBackend* const backend_;
  const std::string model_;
  const std::shared_ptr<const ModelFile> file_;
  const LmShape lm_;
  const int64_t max_token_slots_;
  std::vector<int64_t> pending_release_;  // sent with the next batch
  std::vector<DecodeForkIr> pending_forks_;  // this step's, for its first batch
  std::weak_ptr<const Placement> placement_;  // of num_blocks_
  std::shared_ptr<const Placement> step_placement_;  // NumBlocks' for the next RunStep
  int64_t num_blocks_ = 0;
  std::string variants_mesh_;  // the mesh of variants_
  std::map<std::string, std::shared_ptr<const ModelFile>> variants_;
};

}  // namespace

int64_t BucketOf(int64_t n) {
  int64_t b = 1;
  while (b < n) b *= 2;
  return b;
}

CoordinatorGenerationBackend::LoadedTokenizer CoordinatorGenerationBackend::TokenizerFor(
    const std::string& model_file) {
  const std::filesystem::path file(model_file);
  const std::string dir =
      (file.parent_path() / (file.stem().string() + ".tokenizer")).string();
  absl::MutexLock lock(&mu_);
  auto it = tokenizers_.find(dir);
  if (it != tokenizers_.end()) return it->second;
  std::error_code ec;
  if (model_file.empty() || !std::filesystem::is_directory(dir, ec)) return {};
  // Loaded under the lock: once per folder, however many requests ask.
  LoadedTokenizer loaded;
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tok = tokenizer::LoadTokenizer(dir);
  if (tok.ok()) {
    loaded.tokenizer = std::shared_ptr<const tokenizer::Tokenizer>(*std::move(tok));
  } else {
    loaded.error = tok.status();
  }
  tokenizers_.emplace(dir, loaded);
  return loaded;
}

absl::StatusOr<GenerationModel> CoordinatorGenerationBackend::Model(const std::string& name) {
  MS_ASSIGN_OR_RETURN(ModelStatus status, coordinator_->GetModelStatus(name));
  if (status.model == nullptr) {
    return FailedPrecondition("model '", name, "' did not load: ", status.error.message());
  }
  MS_ASSIGN_OR_RETURN(LmShape lm, InspectLm(*status.model));
  if (status.placement == nullptr || !status.ready) {
    return Unavailable("model '", name, "' is not placed yet (", status.state, ")");
  }
  if (lm.context_length <= 0) {
    return FailedPrecondition("model '", name,
                              "' does not say its context length (the model file's "
                              "generation.context_length)");
  }
  MS_ASSIGN_OR_RETURN(KvBlocks blocks, KvBlocksOf(name, status));
  GenerationModel m;
  m.vocab_size = lm.vocab_size;
  m.context_length = lm.context_length;
  m.eos_token_ids = status.model->eos_token_ids;
  m.block_tokens = options_.block_tokens;
  m.num_blocks = blocks.num_blocks;
  m.block_bytes = blocks.block_bytes;
  m.version = status.version;
  m.hold = status.placement;
  LoadedTokenizer tok = TokenizerFor(status.file);
  m.tokenizer = std::move(tok.tokenizer);
  m.tokenizer_error = std::move(tok.error);
  return m;
}

absl::StatusOr<CoordinatorGenerationBackend::KvBlocks> CoordinatorGenerationBackend::KvBlocksOf(
    const std::string& name, const ModelStatus& status) {
  if (status.model == nullptr || status.placement == nullptr) {
    return Unavailable("model '", name, "' is not placed yet (", status.state, ")");
  }
  KvBlocks blocks;
  {
    absl::MutexLock lock(&mu_);
    auto it = block_bytes_.find(name);
    if (it != block_bytes_.end() && it->second.first.lock() == status.placement) {
      blocks.block_bytes = it->second.second;
    }
  }
  if (blocks.block_bytes == 0) {
    MS_ASSIGN_OR_RETURN(blocks.block_bytes,
                        BlockBytes(*status.model, *status.placement, options_.block_tokens));
    absl::MutexLock lock(&mu_);
    block_bytes_[name] = {status.placement, blocks.block_bytes};
  }
  int64_t devices_per_worker = 1;
  for (const auto& [worker, devices] : status.placement->devices_by_worker) {
    devices_per_worker = std::max<int64_t>(devices_per_worker, devices.size());
  }
  blocks.num_blocks =
      options_.kv_cache_bytes / devices_per_worker / std::max<int64_t>(blocks.block_bytes, 1);
  if (blocks.num_blocks < 1) {
    return FailedPrecondition("model '", name, "': a KV block takes ", blocks.block_bytes,
                              " bytes per device, more than --kv_cache_bytes ",
                              options_.kv_cache_bytes, " over ", devices_per_worker, " devices");
  }
  return blocks;
}

absl::StatusOr<std::unique_ptr<StepExecutor>> CoordinatorGenerationBackend::NewExecutor(
    const std::string& name) {
  MS_ASSIGN_OR_RETURN(ModelStatus status, coordinator_->GetModelStatus(name));
  if (status.model == nullptr) return FailedPrecondition("model '", name, "' did not load");
  MS_ASSIGN_OR_RETURN(LmShape lm, InspectLm(*status.model));
  return std::unique_ptr<StepExecutor>(new CoordinatorStepExecutor(
      coordinator_, this, name, status.model, std::move(lm), options_.max_token_slots));
}

}  // namespace meshserve
