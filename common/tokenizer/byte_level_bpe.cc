// Byte-level BPE: vocabulary and merge tables, the rank-ordered merge loop and
// byte-level decoding. See byte_level_bpe.h for the algorithm.
//
// Thread-safety: all state is written in Create() and read-only afterwards.
#include "common/tokenizer/byte_level_bpe.h"

#include <functional>
#include <queue>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/utf8.h"

namespace meshserve {
namespace tokenizer {
namespace {

// Ids above this are refused: the id table is dense.
constexpr int32_t kMaxTokenId = (1 << 24) - 1;

struct ByteTables {
  std::array<uint32_t, 256> to_unicode;
  std::array<int16_t, 0x144> to_byte;  // -1: not a byte-level character
};

const ByteTables& Tables() {
  static const ByteTables* tables = [] {
    auto* t = new ByteTables;
    t->to_byte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      t->to_unicode[b] = printable ? static_cast<uint32_t>(b) : next++;
      t->to_byte[t->to_unicode[b]] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return *tables;
}

// Raw bytes of a token spelled in byte-level characters.
std::string ByteLevelToBytes(absl::string_view token) {
  const ByteTables& tables = Tables();
  std::string out;
  for (size_t i = 0; i < token.size();) {
    const int len = Utf8SequenceLength(token.substr(i));
    if (len <= 0) {  // not UTF-8: keep the byte as it is
      out.push_back(token[i++]);
      continue;
    }
    const uint32_t cp = DecodeUtf8Sequence(token.data() + i, len);
    if (cp < tables.to_byte.size() && tables.to_byte[cp] >= 0) {
      out.push_back(static_cast<char>(tables.to_byte[cp]));
    } else {
      out.append(token.data() + i, static_cast<size_t>(len));
    }
    i += static_cast<size_t>(len);
  }
  return out;
}

std::string Quote(absl::string_view s) { return absl::StrCat("'", absl::CHexEscape(s), "'"); }

}  // namespace

uint32_t ByteToUnicode(uint8_t b) { return Tables().to_unicode[b]; }

std::string BytesToByteLevel(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(ByteToUnicode(static_cast<uint8_t>(c)), &out);
  return out;
}

absl::StatusOr<std::unique_ptr<ByteLevelBpe>> ByteLevelBpe::Create(
    const Vocab& vocab, const Merges& merges, std::vector<AddedToken> added_tokens,
    const Options& options) {
  std::unique_ptr<ByteLevelBpe> bpe(new ByteLevelBpe);
  bpe->options_ = options;
  MS_RETURN_IF_ERROR(bpe->BuildVocab(vocab));
  MS_RETURN_IF_ERROR(bpe->BuildMerges(merges));
  MS_RETURN_IF_ERROR(bpe->AddAddedTokens(std::move(added_tokens)));
  return bpe;
}

absl::Status ByteLevelBpe::BuildVocab(const Vocab& vocab) {
  for (const auto& [token, id] : vocab) {
    if (id < 0 || id > kMaxTokenId) {
      return absl::InvalidArgumentError(absl::StrCat("vocabulary entry ", Quote(token), " has id ",
                                                     id, ", outside [0, ", kMaxTokenId, "]"));
    }
    if (static_cast<size_t>(id) >= id_bytes_.size()) {
      id_bytes_.resize(static_cast<size_t>(id) + 1);
      id_assigned_.resize(static_cast<size_t>(id) + 1, false);
    }
    if (id_assigned_[id]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocabulary entry ", Quote(token), " reuses id ", id, " (already ",
          Quote(BytesToByteLevel(id_bytes_[id])), ")"));
    }
    if (!token_to_id_.emplace(token, id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocabulary entry ", Quote(token), " appears twice"));
    }
    id_assigned_[id] = true;
    id_bytes_[id] = ByteLevelToBytes(token);
  }
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    AppendUtf8(ByteToUnicode(static_cast<uint8_t>(b)), &ch);
    auto it = token_to_id_.find(ch);
    if (it == token_to_id_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the vocabulary lacks the byte-level token ", Quote(ch), " for byte 0x",
          absl::Hex(b, absl::kZeroPad2), ": not a byte-level BPE vocabulary"));
    }
    byte_ids_[b] = it->second;
  }
  return absl::OkStatus();
}

absl::Status ByteLevelBpe::BuildMerges(const Merges& merges) {
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = token_to_id_.find(a);
    auto ib = token_to_id_.find(b);
    auto iab = token_to_id_.find(absl::StrCat(a, b));
    const char* missing = ia == token_to_id_.end()    ? "its first token"
                          : ib == token_to_id_.end()  ? "its second token"
                          : iab == token_to_id_.end() ? "the merged token"
                                                      : nullptr;
    if (missing != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "merge #", rank, " ", Quote(absl::StrCat(a, " ", b)), ": ", missing, " ",
          Quote(ia == token_to_id_.end() ? a : ib == token_to_id_.end() ? b : a + b),
          " is not in the vocabulary"));
    }
    merges_[PairKey(ia->second, ib->second)] =
        MergeInfo{static_cast<int32_t>(rank), iab->second};
  }
  return absl::OkStatus();
}

absl::Status ByteLevelBpe::AddAddedTokens(std::vector<AddedToken> added_tokens) {
  for (const AddedToken& t : added_tokens) {
    if (t.id < 0 || t.id > kMaxTokenId) {
      return absl::InvalidArgumentError(absl::StrCat("added token ", Quote(t.content),
                                                     " has id ", t.id, ", outside [0, ",
                                                     kMaxTokenId, "]"));
    }
    if (t.content.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("added token ", t.id, " has no content"));
    }
    if (static_cast<size_t>(t.id) >= id_bytes_.size()) {
      id_bytes_.resize(static_cast<size_t>(t.id) + 1);
      id_assigned_.resize(static_cast<size_t>(t.id) + 1, false);
    }
    const std::string bytes = ByteLevelToBytes(t.content);
    if (id_assigned_[t.id] && id_bytes_[t.id] != bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "added token ", Quote(t.content), " takes id ", t.id, ", which the vocabulary gives to ",
          Quote(BytesToByteLevel(id_bytes_[t.id]))));
    }
    id_assigned_[t.id] = true;
    id_bytes_[t.id] = bytes;
    added_content_to_id_[t.content] = t.id;
    if (t.special) special_ids_.insert(t.id);
  }
  added_ = AddedTokenMatcher(std::move(added_tokens));
  return absl::OkStatus();
}

std::optional<int32_t> ByteLevelBpe::TokenToId(absl::string_view content) const {
  if (auto it = added_content_to_id_.find(content); it != added_content_to_id_.end()) {
    return it->second;
  }
  if (auto it = token_to_id_.find(BytesToByteLevel(content)); it != token_to_id_.end()) {
    return it->second;
  }
  return std::nullopt;
}

void ByteLevelBpe::MergeSymbols(std::vector<int32_t>* ids) const {
  struct Candidate {
    int32_t rank;
    int32_t pos;       // left symbol
    int32_t left_id;   // ids when queued; a changed id makes the entry stale
    int32_t right_id;
    int32_t merged_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<int32_t>& sym = *ids;
  const int32_t n = static_cast<int32_t>(sym.size());
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto push = [&](int32_t left, int32_t right) {
    auto it = merges_.find(PairKey(sym[left], sym[right]));
    if (it != merges_.end()) {
      queue.push({it->second.rank, left, sym[left], sym[right], it->second.merged_id});
    }
  };
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1;
    if (i + 1 < n) push(i, i + 1);
  }
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    if (!alive[c.pos]) continue;
    const int32_t right = next[c.pos];
    if (right >= n || sym[c.pos] != c.left_id || sym[right] != c.right_id) continue;
    sym[c.pos] = c.merged_id;
    alive[right] = false;
    next[c.pos] = next[right];
    if (next[right] < n) prev[next[right]] = c.pos;
    if (prev[c.pos] >= 0) push(prev[c.pos], c.pos);
    if (next[c.pos] < n) push(c.pos, next[c.pos]);
  }
  int32_t out = 0;
  for (int32_t i = 0; i < n; i = next[i]) sym[out++] = sym[i];
  sym.resize(out);
}

void ByteLevelBpe::EncodeWord(absl::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (options_.ignore_merges && word.size() > 1) {
    auto it = token_to_id_.find(BytesToByteLevel(word));
    if (it != token_to_id_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols(word.size());
  for (size_t i = 0; i < word.size(); ++i) symbols[i] = byte_ids_[static_cast<uint8_t>(word[i])];
  if (symbols.size() > 1) MergeSymbols(&symbols);
  out->insert(out->end(), symbols.begin(), symbols.end());
}

absl::StatusOr<std::vector<int32_t>> ByteLevelBpe::EncodeText(absl::string_view text) const {
  MS_RETURN_IF_ERROR(ValidateUtf8(text));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  std::string prefixed;
  for (const TextSegment& segment : added_.Split(text)) {
    if (segment.added_id >= 0) {
      ids.push_back(segment.added_id);
      continue;
    }
    absl::string_view run = segment.text;
    if (options_.add_prefix_space && run[0] != ' ') {
      prefixed = absl::StrCat(" ", run);
      run = prefixed;
    }
    MS_ASSIGN_OR_RETURN(std::vector<absl::string_view> words,
                        PreTokenize(run, options_.pattern));
    for (absl::string_view word : words) EncodeWord(word, &ids);
  }
  return ids;
}

absl::StatusOr<std::string> ByteLevelBpe::Decode(absl::Span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size() || !id_assigned_[id]) {
      return absl::OutOfRangeError(absl::StrCat(
          "token id ", id, " at position ", i, " is not a token of this tokenizer (vocab_size ",
          vocab_size(), id >= 0 && id < vocab_size() ? ", id unassigned)" : ")"));
    }
    out += id_bytes_[id];
  }
  return out;
}

}  // namespace tokenizer
}  // namespace meshserve
