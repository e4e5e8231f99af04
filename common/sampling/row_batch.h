// MapRows: the batch loop shared by SampleBatch and SummarizeShardBatch
// (internal to common/sampling): checks that `logits` holds rows.size() rows
// of `row_stride`, calls row_fn(row_logits, row) on each row in order and
// collects the results; the first error fails the call, its row named.
//
// Thread-safety: a pure function of its arguments (row_fn's own aside).
#ifndef MESHSERVE_COMMON_SAMPLING_ROW_BATCH_H_
#define MESHSERVE_COMMON_SAMPLING_ROW_BATCH_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sampling/shard_summary.h"

namespace meshserve {

template <typename Result, typename RowFn>
absl::StatusOr<std::vector<Result>> MapRows(absl::Span<const float> logits, int64_t row_stride,
                                            absl::Span<const RowSampling> rows, RowFn row_fn) {
  if (row_stride < 0 ||
      static_cast<int64_t>(logits.size()) != static_cast<int64_t>(rows.size()) * row_stride) {
    return InvalidArgument(logits.size(), " logits are not ", rows.size(), " rows of ",
                           row_stride);
  }
  std::vector<Result> results;
  results.reserve(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    MS_ASSIGN_OR_RETURN(Result result, row_fn(logits.subspan(r * row_stride, row_stride), rows[r]),
                        "row ", r);
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SAMPLING_ROW_BATCH_H_
