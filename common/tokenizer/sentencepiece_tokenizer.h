// A SentencePiece tokenizer (Llama / Llama 2's `tokenizer.model`) through
// Debian's libsentencepiece (sentencepiece_model.h holds the library behind
// a std-only firewall).
//
// Encode: SentencePiece's own encoding (its normalizer, the dummy-prefix
// space, byte fallback for characters outside the vocabulary), as Python's
// sentencepiece.SentencePieceProcessor.encode(text) gives it; BOS comes from
// Tokenizer::Encode (LoadTokenizer sets add_bos from tokenizer_config.json's
// add_bos_token, default true as Hugging Face's LlamaTokenizer has it).
// Decode: the tokens' bytes concatenated (SentencePieceModel::PieceBytes:
// "▁" is a space, "<0xNN>" the byte NN, specials their text), so a stream of
// tokens decodes piece by piece with utf8.h's Utf8StreamDecoder and never
// splits a character that byte-fallback tokens spell.
//
// Thread-safety: immutable once loaded; Encode and Decode are const and
// thread-safe.
#ifndef MESHSERVE_COMMON_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
#define MESHSERVE_COMMON_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tokenizer/sentencepiece_model.h"
#include "common/tokenizer/tokenizer.h"

namespace meshserve {
namespace tokenizer {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // \error kUnimplemented when built without libsentencepiece;
  //   kInvalidArgument naming `path` when it is not a SentencePiece model.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& path);

  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  // SentencePiece's DecodeIds of the whole sequence (the leading dummy-prefix
  // space dropped, as Python's sp.decode(ids)). OutOfRange as Decode.
  absl::StatusOr<std::string> DecodeText(absl::Span<const int32_t> ids) const;
  int32_t vocab_size() const override { return model_->piece_size(); }
  bool IsSpecial(int32_t id) const override;
  std::optional<int32_t> TokenToId(absl::string_view content) const override;
  // The model's own <s> / </s> ids, if it has them.
  std::optional<int32_t> model_bos_id() const;
  std::optional<int32_t> model_eos_id() const;

 protected:
  absl::StatusOr<std::vector<int32_t>> EncodeText(absl::string_view text) const override;

 private:
  explicit SentencePieceTokenizer(std::unique_ptr<SentencePieceModel> model)
      : model_(std::move(model)) {}
  absl::Status CheckIds(absl::Span<const int32_t> ids) const;

  std::unique_ptr<SentencePieceModel> model_;
};

}  // namespace tokenizer
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
