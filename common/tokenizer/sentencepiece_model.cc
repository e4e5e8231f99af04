// SentencePieceModel (sentencepiece_model.h). No Abseil header may be
// included here (see the header); kept out of unity batches.
#include "common/tokenizer/sentencepiece_model.h"

#include <cstdlib>

#ifdef MESHSERVE_HAVE_SENTENCEPIECE
#include <sentencepiece_processor.h>
#else
namespace sentencepiece {
class SentencePieceProcessor {};  // never made: only destroyed (null)
}  // namespace sentencepiece
#endif

namespace meshserve {
namespace tokenizer {

#ifdef MESHSERVE_HAVE_SENTENCEPIECE

namespace {

constexpr char kSpaceSymbol[] = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// "<0xNN>" -> NN; -1 when the piece is not of that form.
int ByteOfPiece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  char* end = nullptr;
  const std::string hex = piece.substr(3, 2);
  const long value = std::strtol(hex.c_str(), &end, 16);
  if (end != hex.c_str() + 2) return -1;
  return static_cast<int>(value);
}

}  // namespace

bool SentencePieceModel::Available() { return true; }

SentencePieceModel::SentencePieceModel()
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& path,
                                                             std::string* error) {
  std::unique_ptr<SentencePieceModel> model(new SentencePieceModel());
  const sentencepiece::util::Status status = model->sp_->Load(path);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  if (model->sp_->GetPieceSize() <= 0) {
    *error = "the model has no pieces";
    return nullptr;
  }
  return model;
}

bool SentencePieceModel::Encode(const std::string& text, std::vector<int>* ids,
                                std::string* error) const {
  const sentencepiece::util::Status status = sp_->Encode(text, ids);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

std::string SentencePieceModel::DecodeText(const std::vector<int>& ids) const {
  std::string text;
  if (!sp_->Decode(ids, &text).ok()) return "";
  return text;
}

std::string SentencePieceModel::PieceBytes(int id) const {
  const std::string& piece = sp_->IdToPiece(id);
  if (sp_->IsByte(id)) {
    const int byte = ByteOfPiece(piece);
    return byte < 0 ? std::string() : std::string(1, static_cast<char>(byte));
  }
  if (IsSpecial(id)) return piece;
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, 3, kSpaceSymbol) == 0) {
      out += ' ';
      i += 3;
    } else {
      out += piece[i++];
    }
  }
  return out;
}

int SentencePieceModel::piece_size() const { return sp_->GetPieceSize(); }
int SentencePieceModel::bos_id() const { return sp_->bos_id(); }
int SentencePieceModel::eos_id() const { return sp_->eos_id(); }
bool SentencePieceModel::IsSpecial(int id) const {
  return sp_->IsControl(id) || sp_->IsUnknown(id);
}
int SentencePieceModel::PieceToId(const std::string& piece) const {
  const int id = sp_->PieceToId(piece);
  return id >= 0 && id < sp_->GetPieceSize() && sp_->IdToPiece(id) == piece ? id : -1;
}

#else  // !MESHSERVE_HAVE_SENTENCEPIECE

// Built without libsentencepiece: nothing loads.
bool SentencePieceModel::Available() { return false; }
SentencePieceModel::SentencePieceModel() = default;
SentencePieceModel::~SentencePieceModel() = default;
std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string&,
                                                             std::string* error) {
  *error = "meshserve was built without libsentencepiece";
  return nullptr;
}
bool SentencePieceModel::Encode(const std::string&, std::vector<int>*, std::string* error) const {
  *error = "meshserve was built without libsentencepiece";
  return false;
}
std::string SentencePieceModel::DecodeText(const std::vector<int>&) const { return ""; }
std::string SentencePieceModel::PieceBytes(int) const { return ""; }
int SentencePieceModel::piece_size() const { return 0; }
int SentencePieceModel::bos_id() const { return -1; }
int SentencePieceModel::eos_id() const { return -1; }
bool SentencePieceModel::IsSpecial(int) const { return false; }
int SentencePieceModel::PieceToId(const std::string&) const { return -1; }

#endif  // MESHSERVE_HAVE_SENTENCEPIECE

}  // namespace tokenizer
}  // namespace meshserve
