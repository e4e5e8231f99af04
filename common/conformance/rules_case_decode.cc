#include "common/conformance/rules_case_decode.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/json/sharding_json.h"

namespace meshserve {
namespace rules_case {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 40;
constexpr int64_t kMaxElements = int64_t{1} << 60;

absl::StatusOr<int64_t> AsInt(const Json& v, absl::string_view what) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return InvalidArgument(what, " is out of range: ", ShowJson(v));
    }
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d > -1e15 && d < 1e15 && d == static_cast<double>(static_cast<int64_t>(d))) {
      return static_cast<int64_t>(d);
    }
  }
  return InvalidArgument(what, " must be an integer, got ", ShowJson(v));
}

absl::StatusOr<std::vector<int64_t>> AsIntList(const Json& v, absl::string_view what,
                                               bool allow_scalar) {
  if (allow_scalar && (v.is_number())) {
    MS_ASSIGN_OR_RETURN(int64_t x, AsInt(v, what));
    return std::vector<int64_t>{x};
  }
  if (!v.is_array()) return InvalidArgument(what, " must be a list of integers, got ", ShowJson(v));
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    MS_ASSIGN_OR_RETURN(int64_t x, AsInt(v[i], absl::StrCat(what, "[", i, "]")));
    out.push_back(x);
  }
  return out;
}

}  // namespace

const char* FirstKey(const Json& obj, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    if (FindJsonField(obj, k) != nullptr) return k;
  }
  return nullptr;
}

absl::StatusOr<int64_t> GetInt(const Json& obj, const char* key, absl::string_view where) {
  const Json* v = FindJsonField(obj, key);
  if (v == nullptr) return InvalidArgument(where, ".", key, " is required");
  return AsInt(*v, absl::StrCat(where, ".", key));
}

absl::StatusOr<std::optional<int64_t>> GetOptInt(const Json& obj, const char* key,
                                                 absl::string_view where) {
  const Json* v = FindJsonField(obj, key);
  if (v == nullptr) return std::optional<int64_t>();
  MS_ASSIGN_OR_RETURN(int64_t x, AsInt(*v, absl::StrCat(where, ".", key)));
  return std::optional<int64_t>(x);
}

absl::StatusOr<std::vector<int64_t>> GetIntList(const Json& obj, const char* key,
                                                absl::string_view where, bool allow_scalar) {
  const Json* v = FindJsonField(obj, key);
  if (v == nullptr) return InvalidArgument(where, ".", key, " is required");
  return AsIntList(*v, absl::StrCat(where, ".", key), allow_scalar);
}

absl::StatusOr<std::optional<std::vector<int64_t>>> GetOptIntList(const Json& obj,
                                                                  const char* key,
                                                                  absl::string_view where,
                                                                  bool allow_scalar) {
  const Json* v = FindJsonField(obj, key);
  if (v == nullptr) return std::optional<std::vector<int64_t>>();
  MS_ASSIGN_OR_RETURN(std::vector<int64_t> x,
                      AsIntList(*v, absl::StrCat(where, ".", key), allow_scalar));
  return std::optional<std::vector<int64_t>>(std::move(x));
}

absl::StatusOr<std::string> GetString(const Json& obj, const char* key, absl::string_view where) {
  const Json* v = FindJsonField(obj, key);
  if (v == nullptr) return InvalidArgument(where, ".", key, " is required");
  if (!v->is_string()) {
    return InvalidArgument(where, ".", key, " must be a string, got ", ShowJson(*v));
  }
  return v->get<std::string>();
}

absl::StatusOr<std::optional<std::vector<std::string>>> GetOptStringList(
    const Json& obj, const char* key, absl::string_view where) {
  const Json* v = FindJsonField(obj, key);
  if (v == nullptr) return std::optional<std::vector<std::string>>();
  MS_ASSIGN_OR_RETURN(std::vector<std::string> x, JsonStringList(*v, absl::StrCat(where, ".", key)));
  return std::optional<std::vector<std::string>>(std::move(x));
}

absl::StatusOr<std::optional<PartitionSpec>> OutShardingFromJson(const Json& j) {
  if (j.is_null()) return std::optional<PartitionSpec>();
  MS_ASSIGN_OR_RETURN(PartitionSpec spec, PartitionSpecFromJson(j, "out_sharding"));
  return std::optional<PartitionSpec>(std::move(spec));
}

absl::StatusOr<ArrayType> InputFromJson(const Json& input, const Mesh& mesh, DType dtype,
                                        absl::string_view where) {
  if (!input.is_object()) {
    return InvalidArgument(where, " must be an object {\"shape\", \"spec\"}, got ", ShowJson(input));
  }
  MS_ASSIGN_OR_RETURN(std::vector<int64_t> shape, GetIntList(input, "shape", where));
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxDim) {
      return InvalidArgument(where, ".shape has an invalid dim ", d, ": ", ShowJson(input["shape"]));
    }
    if (d != 0 && elements > kMaxElements / d) {
      return InvalidArgument(where, ".shape is too large: ", ShowJson(input["shape"]));
    }
    elements *= d;
  }
  PartitionSpec spec;
  auto s = input.find("spec");
  if (s != input.end()) {
    MS_ASSIGN_OR_RETURN(spec, PartitionSpecFromJson(*s, absl::StrCat(where, ".spec")));
  }
  MS_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> unreduced,
                      GetOptStringList(input, "unreduced", where));
  if (unreduced.has_value()) spec = spec.WithUnreduced(*unreduced);
  if (const Json* dt = FindJsonField(input, "dtype")) {
    if (!dt->is_string()) return InvalidArgument(where, ".dtype must be a string, got ", ShowJson(*dt));
    MS_ASSIGN_OR_RETURN(dtype, ParseDType(dt->get<std::string>()), where, ".dtype");
  }
  MS_ASSIGN_OR_RETURN(ArrayType type, MakeArrayType(dtype, std::move(shape), mesh, spec), where);
  MS_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> varying,
                      GetOptStringList(input, "varying", where));
  if (varying.has_value()) {
    for (const std::string& v : *varying) {
      if (!mesh.AxisIndex(v).has_value()) {
        return InvalidArgument(where, ".varying names axis '", v, "' which is not in ",
                               mesh.ToString());
      }
    }
    type.varying = *varying;
  }
  return type;
}

// Value of the first present key among `keys` as an int list (scalar ok).
absl::StatusOr<std::optional<std::vector<int64_t>>> OptIntsAny(
    const Json& p, std::initializer_list<const char*> keys) {
  const char* k = FirstKey(p, keys);
  if (k == nullptr) return std::optional<std::vector<int64_t>>();
  return GetOptIntList(p, k, "params", /*allow_scalar=*/true);
}

absl::StatusOr<std::vector<int64_t>> IntsAny(const Json& p,
                                             std::initializer_list<const char*> keys) {
  MS_ASSIGN_OR_RETURN(auto v, OptIntsAny(p, keys));
  if (!v.has_value()) return InvalidArgument("params.", *keys.begin(), " is required");
  return *v;
}

absl::StatusOr<int64_t> IntAny(const Json& p, std::initializer_list<const char*> keys,
                               std::optional<int64_t> fallback) {
  const char* k = FirstKey(p, keys);
  if (k == nullptr) {
    if (fallback.has_value()) return *fallback;
    return InvalidArgument("params.", *keys.begin(), " is required");
  }
  return GetInt(p, k, "params");
}

// Axis names given as one string or a list of strings (first present key).
absl::StatusOr<std::optional<std::vector<std::string>>> OptAxisNames(
    const Json& p, std::initializer_list<const char*> keys) {
  const char* k = FirstKey(p, keys);
  if (k == nullptr) return std::optional<std::vector<std::string>>();
  if (p[k].is_string()) {
    return std::optional<std::vector<std::string>>(
        std::vector<std::string>{p[k].get<std::string>()});
  }
  return GetOptStringList(p, k, "params");
}

}  // namespace rules_case
}  // namespace meshserve
