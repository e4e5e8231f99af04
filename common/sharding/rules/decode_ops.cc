// The decode ops' rules (decode_ops.h).
#include "common/sharding/rules/decode_ops.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/rules/rule_util.h"

namespace meshserve {
namespace {

std::string Operands(const ArrayType& q, const ArrayType& k, const ArrayType& v) {
  return absl::StrCat("query ", q.ToString(true), ", key ", k.ToString(true), ", value ",
                      v.ToString(true));
}

absl::Status CheckShapes(const ArrayType& q, const ArrayType& k, const ArrayType& v) {
  const std::string ops = Operands(q, k, v);
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4) {
    return InvalidArgument("attention: query, key and value must be rank 4 ([batch, seq, "
                           "heads, head_dim]), got ", ops);
  }
  for (const ArrayType* t : {&q, &k, &v}) {
    if (rules::IsIntegerDType(t->dtype) || t->dtype == DType::kBool) {
      return InvalidArgument("attention: float operands expected, got ", ops);
    }
  }
  if (q.dtype != k.dtype || q.dtype != v.dtype) {
    return InvalidArgument("attention: query, key and value must have one dtype, got ", ops);
  }
  if (k.shape != v.shape) {
    return InvalidArgument("attention: key and value must have one shape, got ", ops);
  }
  if (q.shape[0] != k.shape[0] || q.shape[3] != k.shape[3]) {
    return InvalidArgument("attention: batch and head_dim must match, got ", ops);
  }
  if (k.shape[2] < 1 || q.shape[2] % k.shape[2] != 0) {
    return InvalidArgument("attention: query heads (", q.shape[2],
                           ") must be a multiple of kv heads (", k.shape[2], "), got ", ops);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ArrayType> AttentionRule(const ArrayType& query, const ArrayType& key,
                                        const ArrayType& value) {
  MS_RETURN_IF_ERROR(CheckShapes(query, key, value));
  const std::vector<const ArrayType*> operands = {&query, &key, &value};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("attention", operands));
  if (!rules::RulesActive(mesh)) {
    return rules::UnshardedResult(query.dtype, query.shape, mesh, operands);
  }
  const rules::Entries q = rules::ExplicitEntries(query);
  const rules::Entries k = rules::ExplicitEntries(key);
  const rules::Entries v = rules::ExplicitEntries(value);
  const std::string ops = Operands(query, key, value);
  for (const ArrayType* t : operands) {
    if (!t->spec().unreduced().empty()) {
      return InvalidArgument("attention: operands must not be unreduced, got ", ops);
    }
  }
  if (k != v) {
    return InvalidArgument("attention: key and value must be sharded alike, got ", ops);
  }
  if (q[0] != k[0]) {
    return InvalidArgument("attention: the batch dim must be sharded alike, got ", ops);
  }
  if (!q[1].empty() || !k[1].empty() || !q[3].empty() || !k[3].empty()) {
    return InvalidArgument(
        "attention: the sequence and head_dim dims must not be sharded (that would contract a "
        "sharded dim), got ", ops);
  }
  if (q[2] != k[2]) {
    return InvalidArgument("attention: query heads and kv heads must be sharded by the same "
                           "axes, got ", ops);
  }
  const int64_t parts = rules::EntrySize(mesh, k[2]);
  if (key.shape[2] % parts != 0) {
    return InvalidArgument("attention: the kv heads (", key.shape[2],
                           ") must divide into the heads' ", parts, " shards, got ", ops);
  }
  return rules::FinishResult("attention", operands, query.dtype, query.shape, mesh, q);
}

absl::StatusOr<ArrayType> SelectRowsRule(const ArrayType& input, int64_t rows) {
  if (input.rank() != 3) {
    return InvalidArgument("select_rows: input must be rank 3 ([batch, seq, features]), got ",
                           input.ToString(true));
  }
  if (rows < 1 || rows > input.shape[1]) {
    return InvalidArgument("select_rows: rows ", rows, " must be in [1, ", input.shape[1],
                           "] for ", input.ToString(true));
  }
  const std::vector<const ArrayType*> operands = {&input};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("select_rows", operands));
  std::vector<int64_t> shape = {input.shape[0], rows, input.shape[2]};
  if (!rules::RulesActive(mesh)) return rules::UnshardedResult(input.dtype, shape, mesh, operands);
  rules::Entries e = rules::ExplicitEntries(input);
  if (!e[1].empty() || !input.spec().unreduced().empty()) {
    return InvalidArgument("select_rows: the row dim must be unsharded and the input reduced, got ",
                           input.ToString(true));
  }
  return rules::FinishResult("select_rows", operands, input.dtype, shape, mesh, e);
}

absl::StatusOr<ArrayType> SampleRule(const ArrayType& logits, int64_t vocab_size) {
  if (logits.rank() != 3 || rules::IsIntegerDType(logits.dtype) || logits.dtype == DType::kBool) {
    return InvalidArgument("sample: logits must be a float array [batch, rows, vocab], got ",
                           logits.ToString(true));
  }
  if (vocab_size < 1 || vocab_size > logits.shape[2] || logits.shape[2] >= (int64_t{1} << 24)) {
    return InvalidArgument("sample: vocab_size ", vocab_size, " must be in [1, ",
                           logits.shape[2], "] (and below 2^24) for ", logits.ToString(true));
  }
  const std::vector<const ArrayType*> operands = {&logits};
  MS_ASSIGN_OR_RETURN(Mesh mesh, rules::CommonMesh("sample", operands));
  std::vector<int64_t> shape = {logits.shape[0], logits.shape[1], kSampleRecordWidth};
  if (!rules::RulesActive(mesh)) {
    return rules::UnshardedResult(DType::kFloat32, shape, mesh, operands);
  }
  rules::Entries e = rules::ExplicitEntries(logits);
  e[2].clear();
  return rules::FinishResult("sample", operands, DType::kFloat32, shape, mesh, e);
}

}  // namespace meshserve
