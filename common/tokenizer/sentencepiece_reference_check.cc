// Checker behind the sentencepiece_tokenizer_reference test
// (common/tokenizer/sentencepiece_reference_test.py, which trains a small
// SentencePiece model with Python's sentencepiece and compares): loads each
// tokenizer folder with LoadTokenizer and prints, as one JSON object on
// stdout, what meshserve makes of the request's texts and id lists:
//   {"dirs": [{"vocab_size", "bos", "eos", "add_bos",
//              "encode": [ids of each text (Encode: BOS as configured) | "error: ..."],
//              "stream": [text of each id list, decoded token by token through
//                         Utf8StreamDecoder as the completion edges stream it],
//              "decode_text": [SentencePiece's DecodeText of each id list]}]}
//
//   sentencepiece_reference_check < REQUEST_JSON
//   REQUEST_JSON: {"dirs": [DIR, ...], "texts": [...], "id_lists": [[...], ...]}
// Exits 1 when a folder does not load.
//
// Thread-safety: single-threaded tool.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "common/tokenizer/sentencepiece_tokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"
#include "nlohmann/json.hpp"

namespace meshserve {
namespace tokenizer {
namespace {

using Json = nlohmann::json;

// The completion edges' text: each id's bytes through one stream decoder.
std::string StreamText(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  Utf8StreamDecoder utf8;
  std::string text;
  for (int32_t id : ids) {
    absl::StatusOr<std::string> bytes = tok.Decode({id});
    if (bytes.ok()) text += utf8.Push(*bytes);
  }
  return text + utf8.Finish();
}

int Run(std::istream& in) {
  const Json request = Json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object()) {
    std::fprintf(stderr, "FAIL: stdin is not a JSON object\n");
    return 1;
  }
  Json out = {{"dirs", Json::array()}};
  for (const Json& dir : request["dirs"]) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = LoadTokenizer(dir.get<std::string>());
    if (!tok.ok()) {
      std::fprintf(stderr, "FAIL: %s\n", tok.status().ToString().c_str());
      return 1;
    }
    const auto* sp = dynamic_cast<const SentencePieceTokenizer*>(tok->get());
    Json d = {{"vocab_size", (*tok)->vocab_size()},
              {"bos", (*tok)->bos_id().value_or(-1)},
              {"eos", (*tok)->eos_id().value_or(-1)},
              {"add_bos", (*tok)->add_bos()},
              {"is_sentencepiece", sp != nullptr}};
    for (const Json& text : request["texts"]) {
      absl::StatusOr<std::vector<int32_t>> ids = (*tok)->Encode(text.get<std::string>());
      d["encode"].push_back(ids.ok() ? Json(*ids) : Json("error: " + ids.status().ToString()));
    }
    for (const Json& list : request["id_lists"]) {
      const std::vector<int32_t> ids = list.get<std::vector<int32_t>>();
      d["stream"].push_back(StreamText(**tok, ids));
      absl::StatusOr<std::string> text =
          sp != nullptr ? sp->DecodeText(ids) : absl::StatusOr<std::string>("");
      d["decode_text"].push_back(text.ok() ? *text : "error: " + text.status().ToString());
    }
    out["dirs"].push_back(d);
  }
  std::printf("%s\n", out.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  return 0;
}

}  // namespace
}  // namespace tokenizer
}  // namespace meshserve

int main() { return meshserve::tokenizer::Run(std::cin); }
