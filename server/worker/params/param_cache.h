// The worker's side of the param cache (ExecuteRequest.param_cache): which
// steps of an installed program depend on the params alone, which of their
// buffers a kFill run keeps, and where a loaded version keeps them.
//
// Why: a program may gather a sharded param on every request (the tiny
// linear model all-gathers its kernel between two workers) although the
// result changes only with the param version. The compiler marks those steps
// (ProgramIr.param_only_steps); a kFill run keeps the marked buffers that
// unmarked steps read, with the version (LoadedModel::kept_params); a kUse run
// skips the marked steps on every worker of the request and reads the kept
// buffers. The coordinator picks one mode for all workers of a request: a
// skipped send is a receive its peer no longer waits for.
//
// Thread-safety: AnalyzeParamOnlySteps is a pure function; KeptParamBuffers
// is thread-safe.
#ifndef MESHSERVE_SERVER_WORKER_PARAMS_PARAM_CACHE_H_
#define MESHSERVE_SERVER_WORKER_PARAMS_PARAM_CACHE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/program/program_ir.h"
#include "common/tensor/tensor.h"

namespace meshserve {

// A buffer of one request's run: (device, name).
using RunBufferKey = std::pair<int64_t, std::string>;
// What a kFill run kept: read-only once kept.
using KeptBuffers = absl::flat_hash_map<RunBufferKey, BoxTensor>;

// A program's param-only steps, checked against its own steps.
struct ParamOnlySteps {
  std::vector<bool> marked;                // by step index
  absl::flat_hash_set<RunBufferKey> kept;  // marked buffers an unmarked step reads
  bool any() const { return !kept.empty(); }
};

// Checks program.param_only_steps: ascending, in range, no output step; a
// marked step reads only params and buffers whose every writer is marked
// (receives excepted: what a peer sent is the peer's to check) and writes
// only buffers whose every writer is marked.
// \error kInvalidArgument naming the step index and buffer.
absl::StatusOr<ParamOnlySteps> AnalyzeParamOnlySteps(const ProgramIr& program);

// Puts `program`'s steps in `order` (order[i]: the old index of new step i),
// with their marks (`steps` and program->param_only_steps).
void ReorderSteps(const std::vector<size_t>& order, ProgramIr* program, ParamOnlySteps* steps);

// Program install (InstalledProgram::cache_key) -> the buffers its kFill run
// kept, of one loaded version.
// Copying (a new version built from an old one: param_store.h) gives an empty
// table: kept buffers derive from the old version's params.
class KeptParamBuffers {
 public:
  KeptParamBuffers() = default;
  KeptParamBuffers(const KeptParamBuffers&) {}
  KeptParamBuffers& operator=(const KeptParamBuffers&) = delete;
  ~KeptParamBuffers();  // takes its bytes off meshserve_worker_param_cache_bytes

  std::shared_ptr<const KeptBuffers> Find(const std::string& program_id) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Keeps `buffers` for `program_id` unless a run kept them already (the
  // first stays: every kFill run of one version computes the same values).
  void Keep(const std::string& program_id, std::shared_ptr<const KeptBuffers> buffers) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets what `program_id` kept (its install was replaced).
  void Drop(const std::string& program_id) const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  struct Entry {
    std::shared_ptr<const KeptBuffers> buffers;
    int64_t bytes = 0;
  };
  mutable absl::flat_hash_map<std::string, Entry> kept_
      ABSL_GUARDED_BY(mu_);
  mutable int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_WORKER_PARAMS_PARAM_CACHE_H_
