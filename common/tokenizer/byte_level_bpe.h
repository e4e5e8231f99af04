// Byte-level BPE (GPT-2, and Hugging Face tokenizers' BPE model with a
// ByteLevel pre-tokenizer, as GPT-2 and Llama 3 ship it).
//
// Encoding, as GPT-2's encoder.py / HF tokenizers do it:
//   1. split the text around added tokens (added_tokens.h);
//   2. cut each ordinary run into words with the pre-tokenizer regex
//      (pretokenizer.h), after prepending ' ' when add_prefix_space is set;
//   3. for each word, map every UTF-8 byte b to the vocabulary symbol of its
//      byte-level character (GPT-2's bytes_to_unicode: printable Latin-1 bytes
//      33..126, 161..172, 174..255 stand for themselves; the other 68 bytes map
//      to U+0100.. in increasing byte order, so ' ' is 'Ġ' U+0120);
//   4. merge: repeatedly take the adjacent pair (a, b) with the LOWEST merge
//      rank (its line number in merges.txt), leftmost first on ties, and replace
//      it with the token a+b, until no adjacent pair has a rank. This is done in
//      O(n log n) per word with a min-heap of (rank, position) and a linked list
//      of symbols; the pair table is a hash map from (id_a, id_b) to
//      (rank, id_ab). With ignore_merges (Llama 3), a word that is itself a
//      vocabulary entry is emitted as that one token first.
// Decoding maps each token's characters back through the byte table (a
// character outside it, only possible in an added token, stands for its own
// UTF-8 bytes), as HF's ByteLevel decoder does.
//
// Create() validates: ids are >= 0 and unique, every one of the 256 byte
// characters is in the vocabulary, both sides of every merge and their
// concatenation are vocabulary entries, and an added token does not take an id
// that the vocabulary gives to a different string. Duplicate merges keep the
// last rank (as HF and GPT-2's dict do).
//
// Thread-safety: immutable after Create(); every method is const.
#ifndef MESHSERVE_COMMON_TOKENIZER_BYTE_LEVEL_BPE_H_
#define MESHSERVE_COMMON_TOKENIZER_BYTE_LEVEL_BPE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tokenizer/added_tokens.h"
#include "common/tokenizer/pretokenizer.h"
#include "common/tokenizer/tokenizer.h"

namespace meshserve {
namespace tokenizer {

// The byte-level character (GPT-2's bytes_to_unicode) of byte `b`, as a code point.
uint32_t ByteToUnicode(uint8_t b);
// The byte-level spelling of raw bytes (each byte as its character, in UTF-8).
std::string BytesToByteLevel(absl::string_view bytes);

class ByteLevelBpe : public Tokenizer {
 public:
  struct Options {
    SplitPattern pattern = SplitPattern::kGpt2;
    bool add_prefix_space = false;
    bool ignore_merges = false;
  };
  // Vocabulary entries and merges are spelled in byte-level characters, as in
  // vocab.json / merges.txt. Merges are in rank order.
  using Vocab = std::vector<std::pair<std::string, int32_t>>;
  using Merges = std::vector<std::pair<std::string, std::string>>;

  static absl::StatusOr<std::unique_ptr<ByteLevelBpe>> Create(
      const Vocab& vocab, const Merges& merges, std::vector<AddedToken> added_tokens,
      const Options& options);

  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(id_bytes_.size()); }
  bool IsSpecial(int32_t id) const override { return special_ids_.contains(id); }
  std::optional<int32_t> TokenToId(absl::string_view content) const override;

  // BPE of one pre-tokenized word given as raw bytes; appends ids to `out`.
  void EncodeWord(absl::string_view word, std::vector<int32_t>* out) const;

  const Options& options() const { return options_; }

 protected:
  absl::StatusOr<std::vector<int32_t>> EncodeText(absl::string_view text) const override;

 private:
  struct MergeInfo {
    int32_t rank;
    int32_t merged_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  ByteLevelBpe() = default;
  absl::Status BuildVocab(const Vocab& vocab);
  absl::Status BuildMerges(const Merges& merges);
  absl::Status AddAddedTokens(std::vector<AddedToken> added_tokens);
  // Applies the merge loop to `ids` (one word's symbols) in place.
  void MergeSymbols(std::vector<int32_t>* ids) const;

  Options options_;
  absl::flat_hash_map<std::string, int32_t> token_to_id_;  // byte-level spelling
  absl::flat_hash_map<uint64_t, MergeInfo> merges_;
  std::array<int32_t, 256> byte_ids_{};
  std::vector<std::string> id_bytes_;   // raw bytes of each id
  std::vector<bool> id_assigned_;
  absl::flat_hash_set<int32_t> special_ids_;
  absl::flat_hash_map<std::string, int32_t> added_content_to_id_;
  AddedTokenMatcher added_;
};

}  // namespace tokenizer
}  // namespace meshserve

#endif  // MESHSERVE_COMMON_TOKENIZER_BYTE_LEVEL_BPE_H_
