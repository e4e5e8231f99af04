// Readers for the files a byte-level BPE tokenizer comes in:
//   vocab.json   {"token": id, ...}, tokens spelled in byte-level characters
//   merges.txt   one merge "a b" per line in rank order; a first line starting
//                with "#version" and blank lines are skipped
//   tokenizer.json  Hugging Face tokenizers' serialization: model type "BPE"
//                (vocab; merges as "a b" strings or [a, b] pairs; ignore_merges;
//                dropout null or 0; no subword prefix/suffix), normalizer null,
//                pre_tokenizer ByteLevel(use_regex=true) = GPT-2's regex, or a
//                Sequence [Split(Regex=<GPT-2's or Llama 3's pattern>, Isolated),
//                ByteLevel(use_regex=false)], decoder ByteLevel or null,
//                added_tokens, and a TemplateProcessing post-processor whose
//                single template may start with a BOS special token.
// Every error names the file (by path) and the offending field or line.
//
// Thread-safety: pure functions (they read files).
#ifndef MESHSERVE_COMMON_TOKENIZER_TOKENIZER_FILES_H_
#define MESHSERVE_COMMON_TOKENIZER_TOKENIZER_FILES_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tokenizer/byte_level_bpe.h"
#include "nlohmann/json.hpp"

namespace meshserve {
namespace tokenizer {

// The whole file; NotFound when it cannot be opened.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);
// The file parsed as JSON; NotFound / InvalidArgument naming the path.
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

absl::StatusOr<ByteLevelBpe::Vocab> ParseVocabJson(const nlohmann::json& json);
absl::StatusOr<ByteLevelBpe::Merges> ParseMergesText(absl::string_view text);

// GPT-2 files. `added_tokens` are matched in text (e.g. <|endoftext|>).
absl::StatusOr<std::unique_ptr<ByteLevelBpe>> LoadVocabAndMerges(
    const std::string& vocab_path, const std::string& merges_path,
    std::vector<AddedToken> added_tokens);

struct TokenizerJson {
  std::unique_ptr<ByteLevelBpe> bpe;
  // The special token a TemplateProcessing post-processor puts first, if any.
  std::optional<std::string> template_bos;
};
absl::StatusOr<TokenizerJson> LoadTokenizerJson(const std::string& path);
// The same from the file's text (errors without the path).
absl::StatusOr<TokenizerJson> ParseTokenizerJsonText(absl::string_view text);

}  // namespace tokenizer
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TOKENIZER_TOKENIZER_FILES_H_
