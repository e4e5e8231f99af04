#include "common/json/json_util.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

template <typename T, typename IsT>
absl::StatusOr<std::vector<T>> JsonList(const Json& j, absl::string_view path,
                                        absl::string_view noun, IsT is_t) {
  if (!j.is_array()) {
    return InvalidArgument(path, " must be a list of ", noun, ", got ", ShowJson(j));
  }
  std::vector<T> out;
  out.reserve(j.size());
  for (const Json& v : j) {
    if (!is_t(v)) {
      return InvalidArgument(path, " must be a list of ", noun, ", got ", ShowJson(v),
                             " in ", ShowJson(j));
    }
    out.push_back(v.get<T>());
  }
  return out;
}

}  // namespace

std::string ShowJson(const Json& j) {
  std::string s = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

absl::StatusOr<Json> ParseJsonText(absl::string_view text) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return InvalidArgument(e.what());
  }
}

const Json* FindJsonField(const Json& obj, absl::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<const Json*> RequiredJsonField(const Json& obj, absl::string_view key,
                                              absl::string_view path) {
  if (!obj.is_object()) {
    return InvalidArgument(path, " must be an object, got ", ShowJson(obj));
  }
  const Json* field = FindJsonField(obj, key);
  if (field == nullptr) return InvalidArgument("missing field '", key, "' in ", path);
  return field;
}

absl::StatusOr<int64_t> JsonInt(const Json& j, absl::string_view path) {
  if (!j.is_number_integer() ||
      (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    return InvalidArgument(path, " must be an integer, got ", ShowJson(j));
  }
  return j.get<int64_t>();
}

absl::StatusOr<double> JsonNumber(const Json& j, absl::string_view path) {
  if (!j.is_number()) return InvalidArgument(path, " must be a number, got ", ShowJson(j));
  return j.get<double>();
}

absl::StatusOr<std::string> JsonString(const Json& j, absl::string_view path) {
  if (!j.is_string()) return InvalidArgument(path, " must be a string, got ", ShowJson(j));
  return j.get<std::string>();
}

absl::StatusOr<bool> JsonBool(const Json& j, absl::string_view path) {
  if (!j.is_boolean()) {
    return InvalidArgument(path, " must be true or false, got ", ShowJson(j));
  }
  return j.get<bool>();
}

absl::StatusOr<std::vector<int64_t>> JsonIntList(const Json& j, absl::string_view path) {
  return JsonList<int64_t>(j, path, "integers",
                           [](const Json& v) { return v.is_number_integer(); });
}

absl::StatusOr<std::vector<std::string>> JsonStringList(const Json& j,
                                                        absl::string_view path) {
  return JsonList<std::string>(j, path, "strings",
                               [](const Json& v) { return v.is_string(); });
}

absl::Status CheckJsonKeys(const Json& obj, std::initializer_list<absl::string_view> allowed,
                           absl::string_view path) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (absl::string_view a : allowed) ok |= (it.key() == a);
    if (!ok) return InvalidArgument(path, ": unknown field '", it.key(), "'");
  }
  return absl::OkStatus();
}

}  // namespace meshserve
