#include "common/base/parallel_for.h"

#include "absl/synchronization/blocking_counter.h"
#include "common/base/elastic_executor.h"

namespace meshserve {

void ParallelFor(size_t n, absl::FunctionRef<void(size_t)> fn) {
  if (n == 0) return;
  if (n == 1) {
    fn(0);
    return;
  }
  absl::BlockingCounter done(static_cast<int>(n));
  ElasticExecutor& executor = ElasticExecutor::Shared();
  for (size_t i = 0; i < n; ++i) {
    // `fn` and `done` outlive the task: this function waits for all of them.
    executor.Schedule([&fn, &done, i] {
      fn(i);
      done.DecrementCount();
    });
  }
  done.Wait();
}

}  // namespace meshserve
