// A firewall around libsentencepiece's SentencePieceProcessor: this header
// and its .cc use only std:: types, because sentencepiece_processor.h (0.1.97,
// Debian 12) declares `namespace absl { using std::string_view; }`, which
// cannot coexist with Abseil's own absl::string_view in one translation
// unit. sentencepiece_tokenizer.h builds the Tokenizer on top of it.
//
// The library is opened at run time (dlopen "libsentencepiece.so.0",
// RTLD_LOCAL | RTLD_DEEPBIND: Debian's build carries its own protobuf 3.14,
// which must not meet the process's libprotobuf 3.21; the .cc says more).
// Built without libsentencepiece-dev (pkg-config found none), or when the
// library cannot be opened, Available() is false and Load fails:
// LoadTokenizer then answers Unimplemented.
//
// Per-token bytes (PieceBytes), what streaming needs: a byte-fallback piece
// "<0xNN>" is the byte NN; a control or unknown piece is its own text ("<s>",
// "</s>", "<unk>", as Hugging Face's decode(skip_special_tokens=False) shows
// them); any other piece is its text with U+2581 ("▁") as a space. So the
// bytes of a completion's tokens are its text as it continues the prompt
// (a first "▁Paris" gives " Paris", as vLLM's completions do), while
// SentencePiece's own DecodeIds of a whole sequence drops the space the
// encoder added in front (add_dummy_prefix): that is DecodeText.
//
// Thread-safety: a loaded model is immutable; its const methods may be
// called from many threads (SentencePieceProcessor's encode and decode are
// const).
#ifndef MESHSERVE_COMMON_TOKENIZER_SENTENCEPIECE_MODEL_H_
#define MESHSERVE_COMMON_TOKENIZER_SENTENCEPIECE_MODEL_H_

#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}  // namespace sentencepiece

namespace meshserve {
namespace tokenizer {

class SentencePieceModel {
 public:
  // True when meshserve was built with libsentencepiece and the library opened.
  static bool Available();
  // Why not, when !Available().
  static std::string Unavailable();
  // The model in file `path` (a serialized ModelProto, "tokenizer.model");
  // null with *error set when it cannot be read or parsed.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path, std::string* error);
  ~SentencePieceModel();

  // `text` (valid UTF-8) to ids, no BOS/EOS. False with *error on failure.
  bool Encode(const std::string& text, std::vector<int>* ids, std::string* error) const;
  // SentencePiece's DecodeIds of the whole sequence (ids in [0, piece_size)).
  std::string DecodeText(const std::vector<int>& ids) const;
  // The bytes of token `id` (0 <= id < piece_size(); see the file comment).
  std::string PieceBytes(int id) const;

  int piece_size() const;
  // -1 when the model has none.
  int bos_id() const;
  int eos_id() const;
  bool IsSpecial(int id) const;  // control or unknown
  // The id of piece `piece` exactly, or -1.
  int PieceToId(const std::string& piece) const;

 private:
  SentencePieceModel();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace tokenizer
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TOKENIZER_SENTENCEPIECE_MODEL_H_
