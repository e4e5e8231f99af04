// LoadTokenizer on folders written by the test: tokenizer.json in GPT-2's and
// Llama 3's shapes (pre-tokenizer, added tokens, BOS from the post-processor or
// tokenizer_config.json), vocab.json + merges.txt, SentencePiece, and every
// kind of bad file, each with its error code and the file named.
#include "common/tokenizer/tokenizer.h"

#include <sys/stat.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/byte_level_bpe.h"
#include "common/tokenizer/pretokenizer.h"
#include "common/tokenizer/sentencepiece_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace tokenizer {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;
using Json = nlohmann::json;

const std::string kG = BytesToByteLevel(" ");  // "Ġ"

// A fresh empty folder under the test's temp dir.
std::string NewDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/tokenizer_loader_test_" + name;
  ::mkdir(dir.c_str(), 0755);
  for (const char* f : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json",
                        "special_tokens_map.json", "tokenizer.model"}) {
    std::remove((dir + "/" + f).c_str());
  }
  return dir;
}

void Write(const std::string& dir, const std::string& file, const std::string& text) {
  std::ofstream(dir + "/" + file, std::ios::binary) << text;
}

// Byte characters at ids 0..255, then "Ġh", "Ġhi", "ll", "'s".
Json Vocab() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[BytesToByteLevel(std::string(1, static_cast<char>(b)))] = b;
  vocab[kG + "h"] = 256;
  vocab[kG + "hi"] = 257;
  vocab["ll"] = 258;
  vocab["'s"] = 259;
  return vocab;
}

Json Gpt2TokenizerJson() {
  Json j;
  j["version"] = "1.0";
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                        {"trim_offsets", true}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["post_processor"] = {{"type", "ByteLevel"}, {"trim_offsets", false}};
  j["added_tokens"] = Json::array({{{"id", 260}, {"content", "<|endoftext|>"},
                                    {"single_word", false}, {"lstrip", false},
                                    {"rstrip", false}, {"normalized", true},
                                    {"special", true}}});
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                {"vocab", Vocab()},
                {"merges", Json::array({kG + " h", kG + "h i", "l l", "' s"})}};
  return j;
}

// Llama 3's shape: Split(regex) + ByteLevel, merges as pairs, ignore_merges,
// BOS from a TemplateProcessing inside a Sequence post-processor.
Json Llama3TokenizerJson() {
  Json j = Gpt2TokenizerJson();
  j["pre_tokenizer"] = Json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": ""}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
       "use_regex": false}]})");
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = std::string(kLlama3PatternText);
  j["model"]["merges"] = Json::array({Json::array({kG, "h"}), Json::array({kG + "h", "i"})});
  j["model"]["ignore_merges"] = true;
  j["added_tokens"] = Json::array(
      {{{"id", 300}, {"content", "<|begin_of_text|>"}, {"special", true}},
       {{"id", 301}, {"content", "<|end_of_text|>"}, {"special", true}}});
  j["post_processor"] = Json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "trim_offsets": false},
      {"type": "TemplateProcessing",
       "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                  {"Sequence": {"id": "A", "type_id": 0}}]}]})");
  return j;
}

TEST(LoadTokenizerTest, Gpt2TokenizerJson) {
  const std::string dir = NewDir("gpt2_json");
  Write(dir, "tokenizer.json", Gpt2TokenizerJson().dump());
  ASSERT_OK_AND_ASSIGN(auto tok, LoadTokenizer(dir));
  EXPECT_EQ(tok->vocab_size(), 261);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->eos_id(), 260);  // GPT-2's <|endoftext|>, as HF's defaults have it
  EXPECT_EQ(tok->bos_id(), 260);
  // "<|endoftext|>" in text is the special token, as GPT2TokenizerFast does.
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, tok->Encode("hi hill's<|endoftext|> hi"));
  EXPECT_THAT(ids, ElementsAre('h', 'i', 257, 258, 259, 260, 257));
  EXPECT_TRUE(tok->IsSpecial(260));
  EXPECT_THAT(tok->Decode(ids),
              ::meshserve::testing::IsOkAndHolds("hi hill's<|endoftext|> hi"));
  // special_tokens_map.json names other tokens; tokenizer_config.json wins over it.
  Write(dir, "special_tokens_map.json", R"({"bos_token": "ll", "eos_token": "'s"})");
  ASSERT_OK_AND_ASSIGN(tok, LoadTokenizer(dir));
  EXPECT_EQ(tok->bos_id(), 258);
  EXPECT_EQ(tok->eos_id(), 259);
  Write(dir, "tokenizer_config.json", R"({"eos_token": "<|endoftext|>"})");
  ASSERT_OK_AND_ASSIGN(tok, LoadTokenizer(dir));
  EXPECT_EQ(tok->bos_id(), 258);
  EXPECT_EQ(tok->eos_id(), 260);
}

TEST(LoadTokenizerTest, ConcurrentEncodesAgree) {
  const std::string dir = NewDir("threads");
  Write(dir, "tokenizer.json", Llama3TokenizerJson().dump());
  ASSERT_OK_AND_ASSIGN(auto tok, LoadTokenizer(dir));
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) texts.push_back(absl::StrCat(" hi ll ", i, " <|end_of_text|>x"));
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& t : texts) expected.push_back(*tok->Encode(t));
  std::vector<int> num_bad(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          auto ids = tok->Encode(texts[i]);
          if (!ids.ok() || *ids != expected[i]) ++num_bad[k];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(num_bad, ::testing::Each(0));
}

TEST(LoadTokenizerTest, Llama3TokenizerJsonAddsBos) {
  const std::string dir = NewDir("llama3_json");
  Write(dir, "tokenizer.json", Llama3TokenizerJson().dump());
  ASSERT_OK_AND_ASSIGN(auto tok, LoadTokenizer(dir));
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->bos_id(), 300);
  // ignore_merges: "ll" is a vocabulary word although no merge makes it.
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, tok->Encode(" hi ll 1234"));
  EXPECT_THAT(ids, ElementsAre(300, 257, 0x20, 'l', 'l', 0x20, '1', '2', '3', '4'));
  ASSERT_OK_AND_ASSIGN(ids, tok->EncodeWithoutBos("ll"));
  EXPECT_THAT(ids, ElementsAre(258));
  // tokenizer_config.json overrides: no BOS, eos named.
  Write(dir, "tokenizer_config.json",
        R"({"add_bos_token": false, "eos_token": {"content": "<|end_of_text|>"}})");
  ASSERT_OK_AND_ASSIGN(tok, LoadTokenizer(dir));
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->eos_id(), 301);
  ASSERT_OK_AND_ASSIGN(ids, tok->Encode("ll"));
  EXPECT_THAT(ids, ElementsAre(258));
}

TEST(LoadTokenizerTest, VocabAndMergesFiles) {
  const std::string dir = NewDir("gpt2_files");
  Json vocab = Vocab();
  vocab["<|endoftext|>"] = 260;
  Write(dir, "vocab.json", vocab.dump());
  Write(dir, "merges.txt", "#version: 0.2\n" + kG + " h\n" + kG + "h i\n\n");
  ASSERT_OK_AND_ASSIGN(auto tok, LoadTokenizer(dir));
  EXPECT_EQ(tok->eos_id(), 260);
  EXPECT_FALSE(tok->add_bos());
  ASSERT_OK_AND_ASSIGN(std::vector<int32_t> ids, tok->Encode("a hi<|endoftext|>"));
  EXPECT_THAT(ids, ElementsAre('a', 257, 260));
}

TEST(LoadTokenizerTest, MissingAndUnsupportedFolders) {
  EXPECT_THAT(LoadTokenizer("/nonexistent/tok"),
              StatusIs(absl::StatusCode::kNotFound, "/nonexistent/tok does not exist"));
  const std::string dir = NewDir("empty");
  EXPECT_THAT(LoadTokenizer(dir), StatusIs(absl::StatusCode::kNotFound, "no tokenizer in"));
  Write(dir, "tokenizer.model", "\x0a\x03piece");
  if (SentencePieceModel::Available()) {
    EXPECT_THAT(LoadTokenizer(dir), StatusIs(absl::StatusCode::kInvalidArgument,
                                             "/tokenizer.model is not a SentencePiece model"));
  } else {
    EXPECT_THAT(LoadTokenizer(dir), StatusIs(absl::StatusCode::kUnimplemented,
                                             SentencePieceModel::Unavailable()));
  }
  const std::string half = NewDir("half");
  Write(half, "vocab.json", Vocab().dump());
  EXPECT_THAT(LoadTokenizer(half), StatusIs(absl::StatusCode::kNotFound, "no merges.txt"));
}

// Loads `json` as tokenizer.json and expects InvalidArgument containing `what`
// and the file's path.
void ExpectBadTokenizerJson(const std::string& text, const std::string& what) {
  const std::string dir = NewDir("bad");
  Write(dir, "tokenizer.json", text);
  auto tok = LoadTokenizer(dir);
  EXPECT_THAT(tok, StatusIs(absl::StatusCode::kInvalidArgument, what));
  EXPECT_THAT(tok, StatusIs(absl::StatusCode::kInvalidArgument, dir + "/tokenizer.json"));
}

TEST(LoadTokenizerTest, BadTokenizerJson) {
  ExpectBadTokenizerJson("{\"model\": ", "not valid JSON");
  ExpectBadTokenizerJson("[]", "top level must be an object");
  Json j = Gpt2TokenizerJson();
  j["model"]["type"] = "WordPiece";
  ExpectBadTokenizerJson(j.dump(), "model.type 'WordPiece' is not supported");
  j = Gpt2TokenizerJson();
  j["model"]["merges"].push_back("Ġh zz");
  ExpectBadTokenizerJson(j.dump(), "its second token 'zz' is not in the vocabulary");
  j = Gpt2TokenizerJson();
  j["model"]["merges"].push_back("onlyone");
  ExpectBadTokenizerJson(j.dump(), "model.merges[4] 'onlyone' is not two tokens");
  j = Gpt2TokenizerJson();
  j["model"]["vocab"]["x"] = "seven";
  ExpectBadTokenizerJson(j.dump(), "token 'x' has id \"seven\", not an integer");
  j = Llama3TokenizerJson();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  ExpectBadTokenizerJson(j.dump(), "unsupported pre-tokenizer regex '\\\\w+'");
  j = Gpt2TokenizerJson();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  ExpectBadTokenizerJson(j.dump(), "pre_tokenizer type 'Metaspace' is not supported");
  j = Gpt2TokenizerJson();
  j["normalizer"] = {{"type", "NFC"}};
  ExpectBadTokenizerJson(j.dump(), "normalizer {\"type\":\"NFC\"} is not supported");
  j = Gpt2TokenizerJson();
  j["added_tokens"][0]["id"] = "x";
  ExpectBadTokenizerJson(j.dump(), "added_tokens[0] needs an integer id");
  j = Gpt2TokenizerJson();
  j["decoder"] = {{"type", "Metaspace"}};
  ExpectBadTokenizerJson(j.dump(), "decoder type 'Metaspace' is not supported");
}

TEST(LoadTokenizerTest, BadGpt2FilesAndConfig) {
  const std::string dir = NewDir("bad_files");
  Write(dir, "vocab.json", Vocab().dump());
  Write(dir, "merges.txt", "#version: 0.2\n" + kG + " h\nh q\n");
  EXPECT_THAT(LoadTokenizer(dir),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "merge #1 'h q': the merged token 'hq' is not in the vocabulary"));
  EXPECT_THAT(LoadTokenizer(dir), StatusIs(absl::StatusCode::kInvalidArgument, "merges.txt"));
  Write(dir, "merges.txt", "a b c\n");
  EXPECT_THAT(LoadTokenizer(dir),
              StatusIs(absl::StatusCode::kInvalidArgument, "line 1 'a b c' is not two tokens"));
  Write(dir, "merges.txt", "");
  Write(dir, "vocab.json", "{\"a\": 1,");
  EXPECT_THAT(LoadTokenizer(dir), StatusIs(absl::StatusCode::kInvalidArgument,
                                           dir + "/vocab.json: not valid JSON"));
  Write(dir, "vocab.json", Vocab().dump());
  Write(dir, "tokenizer_config.json", R"({"eos_token": "<nope>"})");
  EXPECT_THAT(LoadTokenizer(dir),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "tokenizer_config.json: eos_token '<nope>' is not a token"));
  Write(dir, "tokenizer_config.json", R"({"add_bos_token": "yes"})");
  EXPECT_THAT(LoadTokenizer(dir),
              StatusIs(absl::StatusCode::kInvalidArgument, "add_bos_token must be a boolean"));
}

}  // namespace
}  // namespace tokenizer
}  // namespace meshserve
