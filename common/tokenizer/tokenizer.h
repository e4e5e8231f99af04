// The tokenizer interface meshserve's text paths use, and the loader that
// picks an implementation from a checkpoint's tokenizer folder.
//
// A tokenizer maps text to token ids as the checkpoint's Hugging Face
// tokenizer does (tokenizer(text)["input_ids"], add_special_tokens=True), and
// ids back to BYTES (not text: a token may hold part of a UTF-8 character;
// utf8.h turns bytes into text with Python's errors="replace" rule, streamed
// or not).
//
// BOS: Encode() puts bos_id() first when add_bos() is true. add_bos comes from
// tokenizer_config.json's "add_bos_token" when present, otherwise from a
// tokenizer.json TemplateProcessing post-processor that starts with a special
// token (Llama 3), otherwise true for SentencePiece (HF's LlamaTokenizer
// default); GPT-2 adds none.
//
// LoadTokenizer(dir) looks, in this order, for
//   tokenizer.json                 HF "fast" tokenizer: BPE model + ByteLevel
//   vocab.json + merges.txt        GPT-2 files (byte-level BPE)
//   tokenizer.model                SentencePiece (libsentencepiece; also when
//                                  tokenizer.json does not load beside it, as
//                                  Llama 2 ships both): <s>/</s> are bos/eos,
//                                  BOS added unless add_bos_token is false;
//                                  Unimplemented when built without the library
// plus the optional special_tokens_map.json (bos_token, eos_token) and
// tokenizer_config.json (add_bos_token, bos_token, eos_token; it wins). A
// special <|endoftext|> is bos and eos unless those files name others (GPT-2).
// Every unreadable or malformed file gives NotFound / InvalidArgument naming
// the file and the problem; nothing in a file can crash the loader.
//
// Thread-safety: a loaded Tokenizer is immutable; Encode and Decode are const
// and safe to call from many threads at once.
#ifndef MESHSERVE_COMMON_TOKENIZER_TOKENIZER_H_
#define MESHSERVE_COMMON_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace meshserve {
namespace tokenizer {

// Special-token settings that come from the tokenizer's config files.
struct SpecialTokenConfig {
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  bool add_bos = false;  // Encode() puts bos_id first
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // HF's encode(text) with add_special_tokens=True: BOS first when add_bos().
  // InvalidArgument when `text` is not valid UTF-8.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text) const;
  // The same without BOS, whatever add_bos() says.
  absl::StatusOr<std::vector<int32_t>> EncodeWithoutBos(absl::string_view text) const;

  // The bytes of `ids`' tokens, concatenated (special tokens included, as HF's
  // decode with skip_special_tokens=False). OutOfRange naming the id when one
  // is outside [0, vocab_size()) or not assigned to a token.
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const = 0;

  // One more than the largest token id (model vocabulary and added tokens).
  virtual int32_t vocab_size() const = 0;
  // True for the ids of special added tokens (<|endoftext|>, <|begin_of_text|>...).
  virtual bool IsSpecial(int32_t id) const = 0;
  // The id of the token whose text is `content` (an added token's content or
  // a vocabulary entry spelled as its bytes), if any.
  virtual std::optional<int32_t> TokenToId(absl::string_view content) const = 0;

  const SpecialTokenConfig& special_tokens() const { return special_; }
  std::optional<int32_t> bos_id() const { return special_.bos_id; }
  std::optional<int32_t> eos_id() const { return special_.eos_id; }
  bool add_bos() const { return special_.add_bos; }
  void set_special_tokens(const SpecialTokenConfig& special) { special_ = special; }

 protected:
  // Text to ids, no BOS.
  virtual absl::StatusOr<std::vector<int32_t>> EncodeText(absl::string_view text) const = 0;

 private:
  SpecialTokenConfig special_;
};

// Loads the tokenizer in folder `dir` (see the file comment).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir);

}  // namespace tokenizer
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TOKENIZER_TOKENIZER_H_
