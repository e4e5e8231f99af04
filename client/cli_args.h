// Hand-written flag parsing for the cluster sub-commands (infer, describe,
// status, bench, local). Libraries never read flags; each command parses its
// own argv with a table of the flags it takes.
//
// Accepted forms: "--name=value", "--name value", "-name value", "--flag" for
// booleans; everything else is positional. A flag declared repeated may be
// given several times ("--input x=a.npy --input y=b.npy").
//
// Errors are kInvalidArgument and name the flag ("unknown flag --fo",
// "flag --requests: '1x' is not an integer", "missing required flag
// --target"). Commands print them with their usage and exit 2.
//
// Thread-safety: plain values.
#ifndef MESHSERVE_CLIENT_CLI_ARGS_H_
#define MESHSERVE_CLIENT_CLI_ARGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshserve {
namespace client {

struct FlagDef {
  std::string name;  // without dashes
  enum Kind { kValue, kRepeated, kBool } kind = kValue;
  bool required = false;
};

class CliArgs {
 public:
  // Parses argv[1..argc) (argv[0] is the command name).
  // \error kInvalidArgument for an unknown flag, a value flag without value,
  //   a non-repeated flag given twice, or a missing required flag.
  static absl::StatusOr<CliArgs> Parse(int argc, char** argv,
                                       const std::vector<FlagDef>& defs);

  bool Has(absl::string_view name) const;
  // The value of a kValue flag, or `fallback`.
  std::string Get(absl::string_view name, absl::string_view fallback = "") const;
  // Every value of a kRepeated flag, in order.
  std::vector<std::string> GetAll(absl::string_view name) const;
  // \error kInvalidArgument naming the flag when the value is not an integer
  //   in [min_value, max_value].
  absl::StatusOr<int64_t> GetInt(absl::string_view name, int64_t fallback,
                                 int64_t min_value, int64_t max_value) const;
  absl::StatusOr<double> GetDouble(absl::string_view name, double fallback) const;
  // A comma-separated list of integers >= 0 ("4,0,16"), e.g. a box's offset
  // or shape; absent: empty. \error kInvalidArgument naming the flag and the
  // text for an empty list, a non-integer or a negative entry.
  absl::StatusOr<std::vector<int64_t>> GetDims(absl::string_view name) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::vector<std::string>, std::less<>> values_;
  std::vector<std::string> positional_;
};

// Splits "NAME=VALUE" at the first '='.
// \error kInvalidArgument naming `flag` and the text when there is no '=' or
//   either side is empty.
absl::StatusOr<std::pair<std::string, std::string>> SplitNameValue(
    absl::string_view flag, absl::string_view text);

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_CLI_ARGS_H_
