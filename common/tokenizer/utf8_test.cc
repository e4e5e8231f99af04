// UTF-8 decoding against Python: testdata/utf8_replace_cases.txt holds byte
// strings and bytes.decode("utf-8", errors="replace") of each, written by
// tests/tokenizer/gen_utf8_cases.py with /usr/bin/python3. Checks the one-shot
// decoder, and the streaming decoder under every split point and under random
// chunkings (same result, no chunk ending inside a character).
#include "common/tokenizer/utf8.h"

#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace tokenizer {
namespace {

using ::meshserve::testing::StatusIs;

std::vector<std::pair<std::string, std::string>> LoadCases() {
  std::vector<std::pair<std::string, std::string>> cases;
  std::ifstream in(std::string(MS_TOKENIZER_TESTDATA) + "/utf8_replace_cases.txt");
  std::string in_hex, out_hex;
  while (in >> in_hex >> out_hex) {
    auto unhex = [](const std::string& h) {
      return h == "-" ? std::string() : absl::HexStringToBytes(h);
    };
    cases.emplace_back(unhex(in_hex), unhex(out_hex));
  }
  return cases;
}

// True when `text` is well-formed UTF-8 (so no character was split).
bool WellFormed(const std::string& text) { return ValidateUtf8(text).ok(); }

TEST(Utf8Test, LossyDecodeMatchesPythonReplace) {
  const auto cases = LoadCases();
  ASSERT_GT(cases.size(), 4000u) << "missing testdata";
  for (const auto& [in, expected] : cases) {
    EXPECT_EQ(absl::BytesToHexString(DecodeUtf8Lossy(in)), absl::BytesToHexString(expected))
        << "input " << absl::BytesToHexString(in);
  }
}

TEST(Utf8Test, StreamingEqualsOneShotAtEverySplit) {
  for (const auto& [in, expected] : LoadCases()) {
    for (size_t split = 0; split <= in.size(); ++split) {
      Utf8StreamDecoder decoder;
      const std::string a = decoder.Push(in.substr(0, split));
      const std::string b = decoder.Push(in.substr(split));
      const std::string c = decoder.Finish();
      ASSERT_EQ(absl::BytesToHexString(a + b + c), absl::BytesToHexString(expected))
          << "input " << absl::BytesToHexString(in) << " split at " << split;
      EXPECT_TRUE(WellFormed(a) && WellFormed(b) && WellFormed(c));
    }
  }
}

TEST(Utf8Test, StreamingRandomChunksOfAllCasesConcatenated) {
  std::string all_in, all_expected;
  for (const auto& [in, expected] : LoadCases()) {
    all_in += in;
    all_in += 'x';  // keeps each case's tail from running into the next case
    all_expected += expected;
    all_expected += 'x';
  }
  std::mt19937 rng(7);
  Utf8StreamDecoder decoder;
  std::string out;
  for (size_t i = 0; i < all_in.size();) {
    const size_t n = std::min<size_t>(all_in.size() - i, rng() % 5);
    const std::string chunk = decoder.Push(absl::string_view(all_in).substr(i, n));
    ASSERT_TRUE(WellFormed(chunk));
    out += chunk;
    i += n;
  }
  out += decoder.Finish();
  EXPECT_EQ(out, all_expected);
}

TEST(Utf8Test, StreamHoldsBackAnIncompleteCharacter) {
  Utf8StreamDecoder decoder;
  EXPECT_EQ(decoder.Push("a\xE2\x82"), "a");
  EXPECT_EQ(decoder.num_pending_bytes(), 2u);
  EXPECT_EQ(decoder.Push("\xAC"), "\xE2\x82\xAC");
  EXPECT_EQ(decoder.Push("\xF0\x9F"), "");
  EXPECT_EQ(decoder.Finish(), "\xEF\xBF\xBD");  // one U+FFFD for the truncated prefix
  EXPECT_EQ(decoder.num_pending_bytes(), 0u);
}

TEST(Utf8Test, ValidateNamesTheOffset) {
  EXPECT_OK(ValidateUtf8("h\xC3\xA9"));
  EXPECT_THAT(ValidateUtf8("ab\xC0\xAF"),
              StatusIs(absl::StatusCode::kInvalidArgument, "byte offset 2 (bytes c0af)"));
}

}  // namespace
}  // namespace tokenizer
}  // namespace meshserve
