// libFuzzer target for common/tokenizer (to be registered in tests/fuzz/).
// The first input byte picks the mode, the rest is the payload:
//   0: the payload as a tokenizer.json: parse and build (must return a status,
//      never crash); when it loads, encode and decode a fixed text with it;
//   1: the payload as token bytes: DecodeUtf8Lossy must be valid UTF-8 and
//      equal the streaming decoder fed in chunks whose sizes the payload picks;
//   2: the payload as a prompt: for both pre-tokenizer patterns, Encode on a
//      small byte-level tokenizer must accept exactly the valid UTF-8 inputs and
//      Decode(Encode(x)) == x.
// Thread-safety: libFuzzer calls it from one thread.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "common/tokenizer/byte_level_bpe.h"
#include "common/tokenizer/tokenizer_files.h"
#include "common/tokenizer/utf8.h"

namespace meshserve {
namespace tokenizer {
namespace {

std::unique_ptr<ByteLevelBpe> SmallTokenizer(SplitPattern pattern) {
  ByteLevelBpe::Vocab vocab;
  for (int b = 0; b < 256; ++b) {
    vocab.emplace_back(BytesToByteLevel(std::string(1, static_cast<char>(b))), b);
  }
  const std::string g = BytesToByteLevel(" ");
  vocab.emplace_back(g + "t", 256);
  vocab.emplace_back("he", 257);
  vocab.emplace_back(g + "the", 258);
  ByteLevelBpe::Options options;
  options.pattern = pattern;
  AddedToken eot;
  eot.content = "<|eot|>";
  eot.id = 259;
  eot.special = true;
  auto bpe = ByteLevelBpe::Create(vocab, {{g, "t"}, {"h", "e"}, {g + "t", "he"}}, {eot}, options);
  if (!bpe.ok()) std::abort();
  return *std::move(bpe);
}

void FuzzTokenizerJson(absl::string_view payload) {
  auto loaded = ParseTokenizerJsonText(payload);
  if (!loaded.ok()) return;
  auto ids = loaded->bpe->Encode("Hello world, it's 2026!\n");
  if (ids.ok()) (void)loaded->bpe->Decode(*ids);
}

void FuzzUtf8(absl::string_view payload) {
  const std::string whole = DecodeUtf8Lossy(payload);
  if (!ValidateUtf8(whole).ok()) std::abort();
  Utf8StreamDecoder decoder;
  std::string streamed;
  size_t i = 0;
  while (i < payload.size()) {
    const size_t n = std::min<size_t>(payload.size() - i, 1 + static_cast<unsigned char>(payload[i]) % 5);
    const std::string chunk = decoder.Push(payload.substr(i, n));
    if (!ValidateUtf8(chunk).ok()) std::abort();
    streamed += chunk;
    i += n;
  }
  streamed += decoder.Finish();
  if (streamed != whole) std::abort();
}

void FuzzEncode(absl::string_view payload) {
  static const ByteLevelBpe* gpt2 = SmallTokenizer(SplitPattern::kGpt2).release();
  static const ByteLevelBpe* llama3 = SmallTokenizer(SplitPattern::kLlama3).release();
  const bool valid = ValidateUtf8(payload).ok();
  for (const ByteLevelBpe* tok : {gpt2, llama3}) {
    auto ids = tok->Encode(payload);
    if (ids.ok() != valid) std::abort();
    if (!ids.ok()) continue;
    auto bytes = tok->Decode(*ids);
    if (!bytes.ok() || *bytes != payload) std::abort();
  }
}

}  // namespace
}  // namespace tokenizer
}  // namespace meshserve

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view payload(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      meshserve::tokenizer::FuzzTokenizerJson(payload);
      break;
    case 1:
      meshserve::tokenizer::FuzzUtf8(payload);
      break;
    default:
      meshserve::tokenizer::FuzzEncode(payload);
  }
  return 0;
}
