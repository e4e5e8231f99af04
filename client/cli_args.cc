#include "client/cli_args.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace client {
namespace {

const FlagDef* FindDef(const std::vector<FlagDef>& defs, absl::string_view name) {
  for (const FlagDef& def : defs) {
    if (def.name == name) return &def;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<CliArgs> CliArgs::Parse(int argc, char** argv,
                                       const std::vector<FlagDef>& defs) {
  CliArgs args;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {  // everything after is positional
      for (++i; i < argc; ++i) args.positional_.emplace_back(argv[i]);
      break;
    }
    if (arg.size() < 2 || arg[0] != '-' || (arg[1] >= '0' && arg[1] <= '9')) {
      args.positional_.emplace_back(arg);
      continue;
    }
    absl::string_view body = arg;
    if (!absl::ConsumePrefix(&body, "--")) absl::ConsumePrefix(&body, "-");
    std::string name(body);
    std::optional<std::string> value;
    size_t eq = body.find('=');
    if (eq != absl::string_view::npos) {
      name = std::string(body.substr(0, eq));
      value = std::string(body.substr(eq + 1));
    }
    const FlagDef* def = FindDef(defs, name);
    if (def == nullptr) return InvalidArgument("unknown flag --", name);
    if (def->kind == FlagDef::kBool) {
      if (value.has_value() && *value != "true" && *value != "false") {
        return InvalidArgument("flag --", name, ": '", *value,
                               "' is not true or false");
      }
      args.values_[name] = {value.value_or("true")};
      continue;
    }
    if (!value.has_value()) {
      if (i + 1 >= argc) return InvalidArgument("flag --", name, " needs a value");
      value = argv[++i];
    }
    std::vector<std::string>& slot = args.values_[name];
    if (def->kind == FlagDef::kValue && !slot.empty()) {
      return InvalidArgument("flag --", name, " given twice ('", slot.front(),
                             "' and '", *value, "')");
    }
    slot.push_back(*value);
  }
  for (const FlagDef& def : defs) {
    if (def.required && !args.Has(def.name)) {
      return InvalidArgument("missing required flag --", def.name);
    }
  }
  return args;
}

bool CliArgs::Has(absl::string_view name) const {
  return values_.find(name) != values_.end();
}

std::string CliArgs::Get(absl::string_view name, absl::string_view fallback) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.empty()) return std::string(fallback);
  return it->second.back();
}

std::vector<std::string> CliArgs::GetAll(absl::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return {};
  return it->second;
}

absl::StatusOr<int64_t> CliArgs::GetInt(absl::string_view name, int64_t fallback,
                                        int64_t min_value, int64_t max_value) const {
  if (!Has(name)) return fallback;
  std::string text = Get(name);
  int64_t value;
  if (!absl::SimpleAtoi(text, &value)) {
    return InvalidArgument("flag --", name, ": '", text, "' is not an integer");
  }
  if (value < min_value || value > max_value) {
    return InvalidArgument("flag --", name, ": ", value, " is outside [", min_value,
                           ", ", max_value, "]");
  }
  return value;
}

absl::StatusOr<double> CliArgs::GetDouble(absl::string_view name,
                                          double fallback) const {
  if (!Has(name)) return fallback;
  std::string text = Get(name);
  double value;
  if (!absl::SimpleAtod(text, &value)) {
    return InvalidArgument("flag --", name, ": '", text, "' is not a number");
  }
  return value;
}

absl::StatusOr<std::vector<int64_t>> CliArgs::GetDims(absl::string_view name) const {
  std::vector<int64_t> dims;
  if (!Has(name)) return dims;
  const std::string text = Get(name);
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t d;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &d) || d < 0) {
      return InvalidArgument("flag --", name, ": '", text, "' is not a list of integers >= 0 (",
                             "entry '", part, "')");
    }
    dims.push_back(d);
  }
  return dims;
}

absl::StatusOr<std::pair<std::string, std::string>> SplitNameValue(
    absl::string_view flag, absl::string_view text) {
  size_t eq = text.find('=');
  if (eq == absl::string_view::npos || eq == 0 || eq + 1 == text.size()) {
    return InvalidArgument("flag --", flag, ": '", text, "' is not NAME=VALUE");
  }
  return std::make_pair(std::string(text.substr(0, eq)),
                        std::string(text.substr(eq + 1)));
}

}  // namespace client
}  // namespace meshserve
