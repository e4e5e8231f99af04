// vocab.json / merges.txt / tokenizer.json readers; see tokenizer_files.h.
//
// Thread-safety: pure functions.
#include "common/tokenizer/tokenizer_files.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tokenizer/pretokenizer.h"

namespace meshserve {
namespace tokenizer {
namespace {

using Json = nlohmann::json;

std::string TypeOf(const Json& j) { return j.type_name(); }

// obj[key] as a bool; `fallback` when absent or null.
absl::StatusOr<bool> OptionalBool(const Json& obj, const char* key, bool fallback,
                                  absl::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return InvalidArgument(where, ".", key, " must be a boolean, not ", TypeOf(*it));
  }
  return it->get<bool>();
}

// obj["type"] as a string.
absl::StatusOr<std::string> TypeField(const Json& obj, absl::string_view where) {
  if (!obj.is_object()) return InvalidArgument(where, " must be an object, not ", TypeOf(obj));
  auto it = obj.find("type");
  if (it == obj.end() || !it->is_string()) {
    return InvalidArgument(where, ".type is missing or not a string");
  }
  return it->get<std::string>();
}

absl::StatusOr<ByteLevelBpe::Merges> ParseMergesJson(const Json& merges) {
  if (!merges.is_array()) return InvalidArgument("model.merges must be an array");
  ByteLevelBpe::Merges out;
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      std::vector<std::string> parts = absl::StrSplit(s, ' ');
      if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
        return InvalidArgument("model.merges[", i, "] '", s, "' is not two tokens 'a b'");
      }
      out.emplace_back(std::move(parts[0]), std::move(parts[1]));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return InvalidArgument("model.merges[", i, "] is neither 'a b' nor [a, b]: ", m.dump());
    }
  }
  return out;
}

// The model section: vocab, merges and the BPE options meshserve supports.
absl::Status ParseModel(const Json& model, ByteLevelBpe::Vocab* vocab,
                        ByteLevelBpe::Merges* merges, bool* ignore_merges) {
  MS_ASSIGN_OR_RETURN(std::string type, TypeField(model, "model"));
  if (type != "BPE") {
    return InvalidArgument("model.type '", type, "' is not supported (only BPE)");
  }
  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end()) return InvalidArgument("model.vocab is missing");
  MS_ASSIGN_OR_RETURN(*vocab, ParseVocabJson(*vocab_it), "model.vocab");
  auto merges_it = model.find("merges");
  if (merges_it == model.end()) return InvalidArgument("model.merges is missing");
  MS_ASSIGN_OR_RETURN(*merges, ParseMergesJson(*merges_it));
  MS_ASSIGN_OR_RETURN(*ignore_merges, OptionalBool(model, "ignore_merges", false, "model"));
  auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return InvalidArgument("model.dropout ", dropout->dump(), " is not supported (null or 0)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get<std::string>().empty())) {
      return InvalidArgument("model.", key, " ", it->dump(), " is not supported");
    }
  }
  return absl::OkStatus();
}

// A ByteLevel pre-tokenizer: its use_regex (default true) and add_prefix_space.
absl::Status ParseByteLevel(const Json& pre, absl::string_view where, bool* use_regex,
                            bool* add_prefix_space) {
  MS_ASSIGN_OR_RETURN(*use_regex, OptionalBool(pre, "use_regex", true, where));
  MS_ASSIGN_OR_RETURN(*add_prefix_space, OptionalBool(pre, "add_prefix_space", false, where));
  return absl::OkStatus();
}

absl::StatusOr<SplitPattern> ParseSplit(const Json& split) {
  const char* where = "pre_tokenizer.pretokenizers[0]";
  auto pattern = split.find("pattern");
  if (pattern == split.end() || !pattern->is_object() || !pattern->contains("Regex") ||
      !(*pattern)["Regex"].is_string()) {
    return InvalidArgument(where, ".pattern must be {\"Regex\": ...}");
  }
  auto behavior = split.find("behavior");
  if (behavior == split.end() || *behavior != "Isolated") {
    return InvalidArgument(where, ".behavior must be \"Isolated\"");
  }
  MS_ASSIGN_OR_RETURN(bool invert, OptionalBool(split, "invert", false, where));
  if (invert) return InvalidArgument(where, ".invert=true is not supported");
  return SplitPatternFromRegex((*pattern)["Regex"].get<std::string>());
}

absl::Status ParsePreTokenizer(const Json& pre, ByteLevelBpe::Options* options) {
  MS_ASSIGN_OR_RETURN(std::string type, TypeField(pre, "pre_tokenizer"));
  bool use_regex = true;
  if (type == "ByteLevel") {
    MS_RETURN_IF_ERROR(
        ParseByteLevel(pre, "pre_tokenizer", &use_regex, &options->add_prefix_space));
    options->pattern = use_regex ? SplitPattern::kGpt2 : SplitPattern::kNone;
    return absl::OkStatus();
  }
  const Json* list = pre.contains("pretokenizers") ? &pre["pretokenizers"] : nullptr;
  if (type != "Sequence" || list == nullptr || !list->is_array() || list->size() != 2) {
    return InvalidArgument("pre_tokenizer type '", type,
                           "' is not supported: expected ByteLevel or a Sequence of "
                           "[Split, ByteLevel]");
  }
  MS_ASSIGN_OR_RETURN(std::string first, TypeField((*list)[0], "pre_tokenizer.pretokenizers[0]"));
  MS_ASSIGN_OR_RETURN(std::string second,
                      TypeField((*list)[1], "pre_tokenizer.pretokenizers[1]"));
  if (first != "Split" || second != "ByteLevel") {
    return InvalidArgument("pre_tokenizer Sequence [", first, ", ", second,
                           "] is not supported: expected [Split, ByteLevel]");
  }
  MS_ASSIGN_OR_RETURN(options->pattern, ParseSplit((*list)[0]));
  MS_RETURN_IF_ERROR(ParseByteLevel((*list)[1], "pre_tokenizer.pretokenizers[1]", &use_regex,
                                    &options->add_prefix_space));
  if (use_regex) {
    return InvalidArgument(
        "pre_tokenizer.pretokenizers[1]: ByteLevel with use_regex=true after a Split is not "
        "supported");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const Json& list) {
  if (!list.is_array()) return InvalidArgument("added_tokens must be an array");
  std::vector<AddedToken> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& t = list[i];
    const std::string where = absl::StrCat("added_tokens[", i, "]");
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string()) {
      return InvalidArgument(where, " needs an integer id and a string content: ", t.dump());
    }
    AddedToken token;
    const int64_t id = t["id"].get<int64_t>();
    if (id < 0 || id > INT32_MAX) return InvalidArgument(where, ".id ", id, " is out of range");
    token.id = static_cast<int32_t>(id);
    token.content = t["content"].get<std::string>();
    MS_ASSIGN_OR_RETURN(token.special, OptionalBool(t, "special", false, where));
    MS_ASSIGN_OR_RETURN(token.lstrip, OptionalBool(t, "lstrip", false, where));
    MS_ASSIGN_OR_RETURN(token.rstrip, OptionalBool(t, "rstrip", false, where));
    MS_ASSIGN_OR_RETURN(token.single_word, OptionalBool(t, "single_word", false, where));
    out.push_back(std::move(token));
  }
  return out;
}

// The BOS a TemplateProcessing post-processor (possibly inside a Sequence) puts first.
std::optional<std::string> TemplateBos(const Json& post) {
  if (!post.is_object()) return std::nullopt;
  auto type = post.find("type");
  if (type == post.end()) return std::nullopt;
  if (*type == "Sequence" && post.contains("processors") && post["processors"].is_array()) {
    for (const Json& p : post["processors"]) {
      if (auto bos = TemplateBos(p)) return bos;
    }
    return std::nullopt;
  }
  if (*type != "TemplateProcessing" || !post.contains("single")) return std::nullopt;
  const Json& single = post["single"];
  if (!single.is_array() || single.empty() || !single[0].is_object()) return std::nullopt;
  auto special = single[0].find("SpecialToken");
  if (special == single[0].end() || !special->is_object() || !special->contains("id") ||
      !(*special)["id"].is_string()) {
    return std::nullopt;
  }
  return (*special)["id"].get<std::string>();
}

absl::StatusOr<TokenizerJson> ParseTokenizerJson(const Json& root) {
  if (!root.is_object()) return InvalidArgument("the top level must be an object");
  auto model = root.find("model");
  if (model == root.end()) return InvalidArgument("model is missing");
  ByteLevelBpe::Vocab vocab;
  ByteLevelBpe::Merges merges;
  ByteLevelBpe::Options options;
  MS_RETURN_IF_ERROR(ParseModel(*model, &vocab, &merges, &options.ignore_merges));
  auto normalizer = root.find("normalizer");
  if (normalizer != root.end() && !normalizer->is_null()) {
    return InvalidArgument("normalizer ", normalizer->dump().substr(0, 200),
                           " is not supported (only null)");
  }
  auto pre = root.find("pre_tokenizer");
  if (pre == root.end() || pre->is_null()) {
    return InvalidArgument("pre_tokenizer is missing: not a byte-level BPE tokenizer");
  }
  MS_RETURN_IF_ERROR(ParsePreTokenizer(*pre, &options));
  auto decoder = root.find("decoder");
  if (decoder != root.end() && !decoder->is_null()) {
    MS_ASSIGN_OR_RETURN(std::string type, TypeField(*decoder, "decoder"));
    if (type != "ByteLevel") {
      return InvalidArgument("decoder type '", type, "' is not supported (only ByteLevel)");
    }
  }
  std::vector<AddedToken> added;
  auto added_it = root.find("added_tokens");
  if (added_it != root.end() && !added_it->is_null()) {
    MS_ASSIGN_OR_RETURN(added, ParseAddedTokens(*added_it));
  }
  TokenizerJson out;
  MS_ASSIGN_OR_RETURN(out.bpe, ByteLevelBpe::Create(vocab, merges, std::move(added), options));
  auto post = root.find("post_processor");
  if (post != root.end()) out.template_bos = TemplateBos(*post);
  return out;
}

}  // namespace

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  return ReadFileToString(path);
}

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  MS_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    return InvalidArgument(path, ": not valid JSON: ", e.what());
  }
}

absl::StatusOr<ByteLevelBpe::Vocab> ParseVocabJson(const nlohmann::json& json) {
  if (!json.is_object()) {
    return InvalidArgument("the vocabulary must be an object {token: id}, not ", TypeOf(json));
  }
  ByteLevelBpe::Vocab vocab;
  vocab.reserve(json.size());
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (!it.value().is_number_integer()) {
      return InvalidArgument("token '", it.key(), "' has id ", it.value().dump(),
                             ", not an integer");
    }
    const int64_t id = it.value().get<int64_t>();
    if (id < INT32_MIN || id > INT32_MAX) {
      return InvalidArgument("token '", it.key(), "' has id ", id, ", out of range");
    }
    vocab.emplace_back(it.key(), static_cast<int32_t>(id));
  }
  return vocab;
}

absl::StatusOr<ByteLevelBpe::Merges> ParseMergesText(absl::string_view text) {
  ByteLevelBpe::Merges merges;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    absl::ConsumeSuffix(&line, "\r");
    if (line.empty() || (line_number == 1 && absl::StartsWith(line, "#version"))) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (parts.size() != 2) {
      return InvalidArgument("line ", line_number, " '", line, "' is not two tokens 'a b'");
    }
    merges.emplace_back(std::string(parts[0]), std::string(parts[1]));
  }
  return merges;
}

absl::StatusOr<std::unique_ptr<ByteLevelBpe>> LoadVocabAndMerges(
    const std::string& vocab_path, const std::string& merges_path,
    std::vector<AddedToken> added_tokens) {
  MS_ASSIGN_OR_RETURN(Json vocab_json, ReadJsonFile(vocab_path));
  MS_ASSIGN_OR_RETURN(ByteLevelBpe::Vocab vocab, ParseVocabJson(vocab_json), vocab_path);
  MS_ASSIGN_OR_RETURN(std::string merges_text, ReadTextFile(merges_path));
  MS_ASSIGN_OR_RETURN(ByteLevelBpe::Merges merges, ParseMergesText(merges_text), merges_path);
  auto bpe = ByteLevelBpe::Create(vocab, merges, std::move(added_tokens), ByteLevelBpe::Options());
  if (!bpe.ok()) {
    return AnnotateStatus(bpe.status(), vocab_path, " + ", merges_path);
  }
  return bpe;
}

absl::StatusOr<TokenizerJson> LoadTokenizerJson(const std::string& path) {
  MS_ASSIGN_OR_RETURN(Json root, ReadJsonFile(path));
  MS_ASSIGN_OR_RETURN(TokenizerJson out, ParseTokenizerJson(root), path);
  return out;
}

absl::StatusOr<TokenizerJson> ParseTokenizerJsonText(absl::string_view text) {
  Json root;
  try {
    root = Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return InvalidArgument("not valid JSON: ", e.what());
  }
  return ParseTokenizerJson(root);
}

}  // namespace tokenizer
}  // namespace meshserve
