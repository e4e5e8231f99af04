// SentencePieceTokenizer (sentencepiece_tokenizer.h).
#include "common/tokenizer/sentencepiece_tokenizer.h"

#include <utility>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tokenizer/utf8.h"

namespace meshserve {
namespace tokenizer {

absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::Load(
    const std::string& path) {
  if (!SentencePieceModel::Available()) {
    return Unimplemented("SentencePiece tokenizer ", path, ": ",
                         SentencePieceModel::Unavailable());
  }
  std::string error;
  std::unique_ptr<SentencePieceModel> model = SentencePieceModel::Load(path, &error);
  if (model == nullptr) {
    return InvalidArgument(path, " is not a SentencePiece model: ", error);
  }
  return std::unique_ptr<SentencePieceTokenizer>(new SentencePieceTokenizer(std::move(model)));
}

absl::Status SentencePieceTokenizer::CheckIds(absl::Span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= model_->piece_size()) {
      return OutOfRange("token id ", ids[i], " (at ", i, ") is outside the vocabulary [0, ",
                        model_->piece_size(), ")");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SentencePieceTokenizer::Decode(absl::Span<const int32_t> ids) const {
  MS_RETURN_IF_ERROR(CheckIds(ids));
  std::string bytes;
  for (int32_t id : ids) bytes += model_->PieceBytes(id);
  return bytes;
}

absl::StatusOr<std::string> SentencePieceTokenizer::DecodeText(
    absl::Span<const int32_t> ids) const {
  MS_RETURN_IF_ERROR(CheckIds(ids));
  return model_->DecodeText(std::vector<int>(ids.begin(), ids.end()));
}

bool SentencePieceTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < model_->piece_size() && model_->IsSpecial(id);
}

std::optional<int32_t> SentencePieceTokenizer::TokenToId(absl::string_view content) const {
  const int id = model_->PieceToId(std::string(content));
  if (id < 0) return std::nullopt;
  return id;
}

std::optional<int32_t> SentencePieceTokenizer::model_bos_id() const {
  const int id = model_->bos_id();
  if (id < 0 || id >= model_->piece_size()) return std::nullopt;
  return id;
}

std::optional<int32_t> SentencePieceTokenizer::model_eos_id() const {
  const int id = model_->eos_id();
  if (id < 0 || id >= model_->piece_size()) return std::nullopt;
  return id;
}

absl::StatusOr<std::vector<int32_t>> SentencePieceTokenizer::EncodeText(
    absl::string_view text) const {
  MS_RETURN_IF_ERROR(ValidateUtf8(text), "text to encode");
  std::vector<int> ids;
  std::string error;
  if (!model_->Encode(std::string(text), &ids, &error)) {
    return InvalidArgument("SentencePiece could not encode the text: ", error);
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

}  // namespace tokenizer
}  // namespace meshserve
