// A test tokenizer of one piece of text per id, for the generation tests
// (generator_test, the OpenAI HTTP tests, the fake gRPC generation): id i
// decodes to pieces[i] (an empty piece is an unknown id) and text encodes
// character by character to the ids whose piece is that one character.
//
// Thread-safety: immutable after construction; any thread.
#ifndef MESHSERVE_SERVER_COORDINATOR_GENERATE_TESTING_CHAR_TOKENIZER_H_
#define MESHSERVE_SERVER_COORDINATOR_GENERATE_TESTING_CHAR_TOKENIZER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tokenizer/tokenizer.h"

namespace meshserve {
namespace testing {

class CharTokenizer : public tokenizer::Tokenizer {
 public:
  explicit CharTokenizer(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {}
  // Id i is the character alphabet[i].
  static std::vector<std::string> Alphabet(absl::string_view alphabet) {
    std::vector<std::string> pieces;
    for (char ch : alphabet) pieces.emplace_back(1, ch);
    return pieces;
  }

  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size() || pieces_[id].empty()) {
        return absl::OutOfRangeError(absl::StrCat("unknown id ", id));
      }
      out += pieces_[id];
    }
    return out;
  }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  bool IsSpecial(int32_t) const override { return false; }
  std::optional<int32_t> TokenToId(absl::string_view) const override { return std::nullopt; }

 protected:
  absl::StatusOr<std::vector<int32_t>> EncodeText(absl::string_view text) const override {
    std::vector<int32_t> ids;
    for (char ch : text) {
      int32_t id = 0;
      while (id < vocab_size() && pieces_[id] != absl::string_view(&ch, 1)) ++id;
      if (id == vocab_size()) {
        return absl::InvalidArgumentError(absl::StrCat("no token for '", std::string(1, ch), "'"));
      }
      ids.push_back(id);
    }
    return ids;
  }

 private:
  const std::vector<std::string> pieces_;
};

}  // namespace testing
}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GENERATE_TESTING_CHAR_TOKENIZER_H_
