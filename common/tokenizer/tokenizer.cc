// Tokenizer's BOS handling and LoadTokenizer: which files a folder holds,
// and the special-token settings of tokenizer_config.json.
//
// Thread-safety: LoadTokenizer is a pure function of the folder's files.
#include "common/tokenizer/tokenizer.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tokenizer/sentencepiece_tokenizer.h"
#include "common/tokenizer/tokenizer_files.h"

namespace meshserve {
namespace tokenizer {
namespace {

using Json = nlohmann::json;

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool DirExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// tokenizer_config.json's token fields are a string, {"content": ...} or null.
absl::StatusOr<std::optional<std::string>> TokenField(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return std::optional<std::string>((*it)["content"].get<std::string>());
  }
  return InvalidArgument(key, " must be a string or {\"content\": ...}, not ", it->dump());
}

// The id of token `content`, named by field `key`; InvalidArgument if unknown.
absl::StatusOr<std::optional<int32_t>> TokenId(const Tokenizer& tok,
                                               const std::optional<std::string>& content,
                                               const char* key) {
  if (!content.has_value()) return std::optional<int32_t>();
  std::optional<int32_t> id = tok.TokenToId(*content);
  if (!id.has_value()) {
    return InvalidArgument(key, " '", *content, "' is not a token of the tokenizer");
  }
  return id;
}

// Special-token settings from tokenizer_config.json or special_tokens_map.json
// (`config` may be null), over the defaults in `special`.
absl::Status ApplyConfig(const Json& config, const Tokenizer& tok, SpecialTokenConfig* special) {
  if (config.is_null()) return absl::OkStatus();
  if (!config.is_object()) return InvalidArgument("the top level must be an object");
  MS_ASSIGN_OR_RETURN(std::optional<std::string> bos, TokenField(config, "bos_token"));
  MS_ASSIGN_OR_RETURN(std::optional<std::string> eos, TokenField(config, "eos_token"));
  if (bos.has_value()) {
    MS_ASSIGN_OR_RETURN(special->bos_id, TokenId(tok, bos, "bos_token"));
  }
  if (eos.has_value()) {
    MS_ASSIGN_OR_RETURN(special->eos_id, TokenId(tok, eos, "eos_token"));
  }
  auto add_bos = config.find("add_bos_token");
  if (add_bos != config.end() && !add_bos->is_null()) {
    if (!add_bos->is_boolean()) {
      return InvalidArgument("add_bos_token must be a boolean, not ", add_bos->dump());
    }
    special->add_bos = add_bos->get<bool>();
  }
  return absl::OkStatus();
}

// Reads `file` of `dir` when present and applies its special-token fields.
absl::Status ApplyConfigFile(const std::string& dir, const char* file, const Tokenizer& tok,
                             SpecialTokenConfig* special) {
  const std::string path = dir + "/" + file;
  if (!FileExists(path)) return absl::OkStatus();
  MS_ASSIGN_OR_RETURN(Json config, ReadJsonFile(path));
  MS_RETURN_IF_ERROR(ApplyConfig(config, tok, special), path);
  return absl::OkStatus();
}

// Added tokens of a vocab.json + merges.txt folder: GPT-2's <|endoftext|>
// (HF's GPT2Tokenizer default for bos/eos/unk) and the config's named tokens,
// as HF registers them: special, matched in text.
std::vector<AddedToken> GptSpecialTokens(const Json& vocab, const Json& config) {
  std::vector<std::string> names = {"<|endoftext|>"};
  if (config.is_object()) {
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
      auto name = TokenField(config, key);
      if (name.ok() && name->has_value()) names.push_back(**name);
    }
  }
  std::vector<AddedToken> out;
  for (const std::string& name : names) {
    auto it = vocab.find(name);
    if (it == vocab.end() || !it->is_number_integer()) continue;
    AddedToken t;
    t.content = name;
    t.id = it->get<int32_t>();
    t.special = true;
    out.push_back(t);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGpt2Files(const std::string& dir,
                                                         const Json& config) {
  const std::string vocab_path = dir + "/vocab.json";
  const std::string merges_path = dir + "/merges.txt";
  if (!FileExists(merges_path)) return NotFound(dir, " has vocab.json but no merges.txt");
  MS_ASSIGN_OR_RETURN(Json vocab, ReadJsonFile(vocab_path));
  std::vector<AddedToken> added = GptSpecialTokens(vocab, config);
  MS_ASSIGN_OR_RETURN(std::unique_ptr<ByteLevelBpe> bpe,
                      LoadVocabAndMerges(vocab_path, merges_path, added));
  return std::unique_ptr<Tokenizer>(std::move(bpe));
}

// tokenizer.model (SentencePiece): <s> / </s> are bos / eos, and BOS is added
// (Hugging Face's LlamaTokenizer: add_bos_token defaults to true) unless the
// config files say otherwise.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceFolder(const std::string& dir,
                                                                   SpecialTokenConfig* special) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<SentencePieceTokenizer> sp,
                      SentencePieceTokenizer::Load(dir + "/tokenizer.model"));
  special->bos_id = sp->model_bos_id();
  special->eos_id = sp->model_eos_id();
  special->add_bos = special->bos_id.has_value();
  return std::unique_ptr<Tokenizer>(std::move(sp));
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text) const {
  MS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, EncodeText(text));
  if (special_.add_bos && special_.bos_id.has_value()) ids.insert(ids.begin(), *special_.bos_id);
  return ids;
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::EncodeWithoutBos(absl::string_view text) const {
  return EncodeText(text);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir) {
  if (!DirExists(dir)) return NotFound("tokenizer folder ", dir, " does not exist");
  const std::string config_path = dir + "/tokenizer_config.json";
  Json config;  // null when absent
  if (FileExists(config_path)) {
    MS_ASSIGN_OR_RETURN(config, ReadJsonFile(config_path));
  }
  const bool has_sentencepiece = FileExists(dir + "/tokenizer.model");
  std::unique_ptr<Tokenizer> tok;
  SpecialTokenConfig special;
  if (FileExists(dir + "/tokenizer.json")) {
    auto loaded = LoadTokenizerJson(dir + "/tokenizer.json");
    if (!loaded.ok() && has_sentencepiece) {
      // Llama 2 ships both; its tokenizer.json is not byte-level BPE.
      MS_ASSIGN_OR_RETURN(tok, LoadSentencePieceFolder(dir, &special),
                          "tokenizer.json did not load (", loaded.status().message(), ")");
    } else {
      MS_RETURN_IF_ERROR(loaded.status());
      if (loaded->template_bos.has_value()) {
        special.bos_id = loaded->bpe->TokenToId(*loaded->template_bos);
        special.add_bos = special.bos_id.has_value();
      }
      tok = std::move(loaded->bpe);
    }
  } else if (FileExists(dir + "/vocab.json")) {
    MS_ASSIGN_OR_RETURN(tok, LoadGpt2Files(dir, config));
  } else if (has_sentencepiece) {
    MS_ASSIGN_OR_RETURN(tok, LoadSentencePieceFolder(dir, &special));
  } else {
    return NotFound("no tokenizer in ", dir,
                    ": expected tokenizer.json, vocab.json + merges.txt or tokenizer.model");
  }
  // GPT-2's convention (HF GPT2Tokenizer's defaults): a special <|endoftext|>
  // is bos and eos unless a config file names others.
  std::optional<int32_t> endoftext = tok->TokenToId("<|endoftext|>");
  if (endoftext.has_value() && tok->IsSpecial(*endoftext)) {
    special.eos_id = endoftext;
    if (!special.bos_id.has_value()) special.bos_id = endoftext;
  }
  MS_RETURN_IF_ERROR(ApplyConfigFile(dir, "special_tokens_map.json", *tok, &special));
  MS_RETURN_IF_ERROR(ApplyConfig(config, *tok, &special), config_path);
  if (special.add_bos && !special.bos_id.has_value()) {
    return InvalidArgument(config_path, ": add_bos_token is true but there is no bos_token");
  }
  tok->set_special_tokens(special);
  return tok;
}

}  // namespace tokenizer
}  // namespace meshserve
