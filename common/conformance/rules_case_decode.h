// Internal to rules_cases.cc / rules_case_ops.cc: typed access to a case's
// JSON fields with errors that name the field and the offending value.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_CONFORMANCE_RULES_CASE_DECODE_H_
#define MESHSERVE_COMMON_CONFORMANCE_RULES_CASE_DECODE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/base/dtype.h"
#include "common/sharding/mesh.h"
#include "common/sharding/named_sharding.h"
#include "common/sharding/partition_spec.h"
#include "common/json/json_util.h"

namespace meshserve {
namespace rules_case {

// Field access on the object `obj` (`where` prefixes messages: "params").
// Missing or null fields are nullopt for the Opt variants and an error
// otherwise. Int lists also accept a single int when `allow_scalar`.
absl::StatusOr<int64_t> GetInt(const Json& obj, const char* key, absl::string_view where);
absl::StatusOr<std::optional<int64_t>> GetOptInt(const Json& obj, const char* key,
                                                 absl::string_view where);
absl::StatusOr<std::vector<int64_t>> GetIntList(const Json& obj, const char* key,
                                                absl::string_view where,
                                                bool allow_scalar = false);
absl::StatusOr<std::optional<std::vector<int64_t>>> GetOptIntList(const Json& obj,
                                                                  const char* key,
                                                                  absl::string_view where,
                                                                  bool allow_scalar = false);
absl::StatusOr<std::string> GetString(const Json& obj, const char* key, absl::string_view where);
absl::StatusOr<std::optional<std::vector<std::string>>> GetOptStringList(
    const Json& obj, const char* key, absl::string_view where);
// The first of `keys` present (and non-null) in obj, or nullptr.
const char* FirstKey(const Json& obj, std::initializer_list<const char*> keys);

// The first present key among `keys` (aliases of one param, the first named
// in errors): as an int list (a scalar allowed), a required int list, an int
// (`fallback` when absent), axis names (one string or a list).
absl::StatusOr<std::optional<std::vector<int64_t>>> OptIntsAny(
    const Json& p, std::initializer_list<const char*> keys);
absl::StatusOr<std::vector<int64_t>> IntsAny(const Json& p,
                                             std::initializer_list<const char*> keys);
absl::StatusOr<int64_t> IntAny(const Json& p, std::initializer_list<const char*> keys,
                               std::optional<int64_t> fallback = std::nullopt);
absl::StatusOr<std::optional<std::vector<std::string>>> OptAxisNames(
    const Json& p, std::initializer_list<const char*> keys);

// null -> nullopt; otherwise PartitionSpecFromJson (common/json/sharding_json.h).
absl::StatusOr<std::optional<PartitionSpec>> OutShardingFromJson(const Json& j);
// One input; `dtype` is the case default (an input's own "dtype" wins).
absl::StatusOr<ArrayType> InputFromJson(const Json& input, const Mesh& mesh, DType dtype,
                                        absl::string_view where);

// Runs `op` on decoded inputs. `out_sharding_given` distinguishes a JSON null
// from an absent field only for error messages.
absl::StatusOr<ArrayType> RunOp(absl::string_view op, const Json& params,
                                absl::Span<const ArrayType> inputs,
                                const std::optional<PartitionSpec>& out_sharding);

}  // namespace rules_case
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_CONFORMANCE_RULES_CASE_DECODE_H_
