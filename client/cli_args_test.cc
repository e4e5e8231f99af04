// The CLI flag parser (cli_args.h): flag forms, repeated flags, positionals and
// the errors that name the flag.
#include "client/cli_args.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace client {
namespace {

using ::meshserve::testing::StatusIs;
using ::testing::ElementsAre;

absl::StatusOr<CliArgs> ParseArgs(std::vector<std::string> words,
                                  const std::vector<FlagDef>& defs) {
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  return CliArgs::Parse(static_cast<int>(argv.size()), argv.data(), defs);
}

TEST(CliArgsTest, ParsesFormsRepeatedAndPositional) {
  std::vector<FlagDef> defs = {{"target", FlagDef::kValue, true},
                               {"input", FlagDef::kRepeated, false},
                               {"verbose", FlagDef::kBool, false}};
  ASSERT_OK_AND_ASSIGN(CliArgs args,
                       ParseArgs({"infer", "--target=h:1", "MODEL", "--input", "x=a.npy",
                                  "-input", "y=b.npy", "--verbose"},
                                 defs));
  EXPECT_EQ(args.Get("target"), "h:1");
  EXPECT_THAT(args.GetAll("input"), ElementsAre("x=a.npy", "y=b.npy"));
  EXPECT_TRUE(args.Has("verbose"));
  EXPECT_THAT(args.positional(), ElementsAre("MODEL"));
}

TEST(CliArgsTest, ErrorsNameTheFlag) {
  std::vector<FlagDef> defs = {{"target", FlagDef::kValue, true},
                               {"requests", FlagDef::kValue, false}};
  EXPECT_THAT(ParseArgs({"c", "--target", "t", "--modle", "m"}, defs),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown flag --modle"));
  EXPECT_THAT(ParseArgs({"c"}, defs),
              StatusIs(absl::StatusCode::kInvalidArgument, "missing required flag --target"));
  EXPECT_THAT(ParseArgs({"c", "--target"}, defs),
              StatusIs(absl::StatusCode::kInvalidArgument, "--target needs a value"));
  EXPECT_THAT(ParseArgs({"c", "--target", "a", "--target", "b"}, defs),
              StatusIs(absl::StatusCode::kInvalidArgument, "given twice"));
  ASSERT_OK_AND_ASSIGN(CliArgs args, ParseArgs({"c", "--target", "t", "--requests", "1x"}, defs));
  EXPECT_THAT(args.GetInt("requests", 1, 1, 100),
              StatusIs(absl::StatusCode::kInvalidArgument, "--requests: '1x'"));
  ASSERT_OK_AND_ASSIGN(args, ParseArgs({"c", "--target", "t", "--requests", "0"}, defs));
  EXPECT_THAT(args.GetInt("requests", 1, 1, 100),
              StatusIs(absl::StatusCode::kInvalidArgument, "outside [1, 100]"));
  EXPECT_THAT(SplitNameValue("input", "x.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument, "--input: 'x.npy'"));
}

}  // namespace
}  // namespace client
}  // namespace meshserve
