// Typed access to nlohmann JSON values, with errors that name the field path
// and show the offending value (after tensorstore's internal/json_binding).
//
// Every decoder of a JSON file in the tree (model files, plan requests,
// conformance cases) reads its scalars and lists through these functions, so
// one kind of mistake gets one message:
//   JsonInt(j, "seed")          "seed must be an integer, got \"zero\""
//   JsonIntList(j, "shape")     "shape must be a list of integers, got \"a\" in [4,\"a\"]"
//   JsonStringList(j, "x.u")    "x.u must be a list of strings, got 3 in [3]"
//   CheckJsonKeys(obj, {..}, "top level")  "top level: unknown field 'sede'"
// A `path` is the field's name as the user would write it ("src.spec",
// "input 'x' shape"). Values are shown by ShowJson: compact, cut to 80 chars.
// All errors are kInvalidArgument.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_JSON_JSON_UTIL_H_
#define MESHSERVE_COMMON_JSON_JSON_UTIL_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace meshserve {

// Object keys keep the order they were written in (mesh axes are ordered).
using Json = nlohmann::ordered_json;

// `j` dumped compactly (invalid UTF-8 replaced), cut to 77 chars + "...".
std::string ShowJson(const Json& j);

// Parses `text`. \error kInvalidArgument carrying the parser's message (with
// the byte position), for callers to prefix ("broken JSON: ...").
absl::StatusOr<Json> ParseJsonText(absl::string_view text);

// The member `key` of `obj`, or nullptr when `obj` is not an object or the
// member is missing or null.
const Json* FindJsonField(const Json& obj, absl::string_view key);

// The member `key` of the object `obj`, required.
// \error "<path> must be an object, got <obj>"; "missing field '<key>' in <path>".
absl::StatusOr<const Json*> RequiredJsonField(const Json& obj, absl::string_view key,
                                              absl::string_view path);

// Scalars. \error "<path> must be an integer|a number|a string|true or false, got <j>".
absl::StatusOr<int64_t> JsonInt(const Json& j, absl::string_view path);
absl::StatusOr<double> JsonNumber(const Json& j, absl::string_view path);
absl::StatusOr<std::string> JsonString(const Json& j, absl::string_view path);
absl::StatusOr<bool> JsonBool(const Json& j, absl::string_view path);

// Lists. \error "<path> must be a list of integers|strings, got <j>" or
// "..., got <element> in <j>".
absl::StatusOr<std::vector<int64_t>> JsonIntList(const Json& j, absl::string_view path);
absl::StatusOr<std::vector<std::string>> JsonStringList(const Json& j,
                                                        absl::string_view path);

// Every key of the object `obj` is one of `allowed`.
// \error "<path>: unknown field '<key>'".
absl::Status CheckJsonKeys(const Json& obj, std::initializer_list<absl::string_view> allowed,
                           absl::string_view path);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_JSON_JSON_UTIL_H_
