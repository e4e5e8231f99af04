// The coordinator as a GenerationBackend (generator.h): a model's limits come
// from its model file (InspectLm) and placement, and a step runs as one
// request per weight version through Coordinator::Infer on the model's decode
// variant (server/compiler/decode_model.h), with the step's DecodeStepIr
// riding along to every worker. The variant is built for the current
// placement's mesh (its LM head sharded over the devices; variant key
// "decode:<T>x<R>@<mesh>"); a new placement's mesh gets new variants.
//
// Buckets. A step's tokens are packed into input_ids [1, T] with T the next
// power of two >= the step's tokens, and its sampled rows into R = the next
// power of two >= their count (R <= T): at most log2(T_max) * log2(R_max)
// decode programs per model and placement, each compiled once.
//
// KV blocks. The scheduler counts blocks as the workers' pools do: a block
// holds block_tokens positions of every attention layer for the kv heads of
// one device; a worker splits kv_cache_bytes over the devices it hosts; the
// scheduler takes the smallest pool of the placement, and the executor reports
// it again before each step (a model placed anew, KvBlocksOf), so the
// scheduler's count follows the workers'. kv_cache_bytes must not
// exceed the workers' own (--kv_cache_bytes of both, as `meshserve local`
// passes it): a worker that has less refuses the step (RESOURCE_EXHAUSTED)
// and the scheduler rebuilds and retries, then fails the sequences.
//
// Forks (n choices sharing a prompt's prefill: StepPlan::forks) ride the
// step's first batch as DecodeStep.forks; the workers run them before its
// releases and spans. A step of releases only (the last sequences ended)
// runs no program: ReleaseSequences goes to each worker of the placement at
// once, over the coordinator's own connections (Coordinator::WorkerClientFor;
// where a worker answers UNIMPLEMENTED, a step of one padding token carries
// them).
//
// Tokenizer. A model file NAME.json with a folder NAME.tokenizer/ beside it
// (as `meshserve import` writes) has that tokenizer (LoadTokenizer), loaded
// once per folder and cached, a load error included (text prompts are then
// refused with it). Without the folder the model takes token ids only.
//
// Thread-safety: the backend is thread-safe; an executor is used by its
// model's loop thread only.
#ifndef MESHSERVE_SERVER_COORDINATOR_GENERATE_COORDINATOR_BACKEND_H_
#define MESHSERVE_SERVER_COORDINATOR_GENERATE_COORDINATOR_BACKEND_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#include "server/coordinator/coordinator.h"
#include "server/coordinator/generate/generator.h"
#include "server/coordinator/worker_client.h"

namespace meshserve {

struct CoordinatorBackendOptions {
  int64_t kv_cache_bytes = int64_t{1} << 30;  // per worker and model
  int64_t block_tokens = 16;
  int64_t max_token_slots = 1024;  // the largest T bucket
};

class CoordinatorGenerationBackend : public GenerationBackend {
 public:
  // `coordinator` must outlive the backend.
  CoordinatorGenerationBackend(Coordinator* coordinator, CoordinatorBackendOptions options)
      : coordinator_(coordinator), options_(options) {}

  absl::StatusOr<GenerationModel> Model(const std::string& name) override;
  absl::StatusOr<std::unique_ptr<StepExecutor>> NewExecutor(const std::string& name) override;

  // The KV blocks of the smallest pool of `status`'s placement of model
  // `name` (see the file comment), and a block's bytes on one device; the
  // executors ask before each step, so a model placed anew (another mesh,
  // other devices per worker) resizes the scheduler's count.
  // \error kUnavailable (not placed), kFailedPrecondition (a block does not fit).
  struct KvBlocks {
    int64_t num_blocks = 0;
    int64_t block_bytes = 0;
  };
  absl::StatusOr<KvBlocks> KvBlocksOf(const std::string& name, const ModelStatus& status)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct LoadedTokenizer {
    std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
    absl::Status error;
  };
  // The tokenizer beside model file `model_file` (NAME.tokenizer/), cached.
  LoadedTokenizer TokenizerFor(const std::string& model_file) ABSL_LOCKS_EXCLUDED(mu_);

  Coordinator* const coordinator_;
  const CoordinatorBackendOptions options_;
  absl::Mutex mu_;
  std::map<std::string, LoadedTokenizer> tokenizers_ ABSL_GUARDED_BY(mu_);  // by folder
  // A KV block's bytes by placement (typing the decode variant is not free,
  // and Model() runs for every request). Weak: a retired placement must go
  // (the coordinator unloads it when nobody holds it).
  std::map<std::string, std::pair<std::weak_ptr<const Placement>, int64_t>> block_bytes_
      ABSL_GUARDED_BY(mu_);  // by model
};

// The smallest power of two >= n (n >= 1).
int64_t BucketOf(int64_t n);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GENERATE_COORDINATOR_BACKEND_H_
