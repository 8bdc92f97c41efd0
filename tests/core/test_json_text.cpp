// parse_json_text and its siblings: JSON a user hands the engine is read whole
// or refused by name; a value nested past kMaxJsonDepth is refused before it
// is parsed (100,000 levels crashed the process when the value was copied or
// shown), and a value shown in a message is shown short.
#include <gtest/gtest.h>

#include <string>

#include "engine/core/json_text.h"

using namespace ptdp;

namespace {
std::string nested(int levels, const std::string &open = "[", const std::string &close = "]") {
  std::string s;
  for (int i = 0; i < levels; i++) s += open;
  for (int i = 0; i < levels; i++) s += close;
  return s;
}
}  // namespace

TEST(JsonText, NestingPastTheLimitIsRefusedByName) {
  EXPECT_NO_THROW(parse_json_text(nested(kMaxJsonDepth), "a.json"));
  for (const std::string &deep : {nested(kMaxJsonDepth + 1), nested(100000),
                                  "{\"a\":" + nested(kMaxJsonDepth) + "}"}) {
    try {
      parse_json_text(deep, "'a.json'");
      ADD_FAILURE() << "accepted " << deep.size() << " bytes nested too deep";
    } catch (const Error &e) {
      EXPECT_EQ(e.code(), Status::corrupt_data);
      EXPECT_NE(std::string(e.what()).find("'a.json' is not JSON ptdp reads: it nests more than 256 levels"),
                std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(parse_json_or_discard(nested(100000)).is_discarded());
  EXPECT_TRUE(parse_json_or_discard("{\"a\": 1}").is_object());
}

// Brackets inside strings (escaped quotes included) are text, not nesting.
TEST(JsonText, BracketsInStringsDoNotCount) {
  const std::string text = "{\"s\": \"" + nested(1000) + "\\\"[[[\"}";
  EXPECT_EQ(json_too_deep_at(text.data(), text.size()), -1);
  EXPECT_EQ(parse_json_text(text, "s").at("s").get<std::string>().size(), 2004u);
}

TEST(JsonText, AnExcerptIsShortAndAscii) {
  EXPECT_EQ(json_excerpt(nlohmann::json::parse("[1, \"x\"]")), "[1,\"x\"]");
  const std::string long_one = json_excerpt(nlohmann::json::parse(nested(100)));
  EXPECT_EQ(long_one, std::string(100, '[') + std::string(20, ']') + "... (200 characters)");
  EXPECT_EQ(json_excerpt(nlohmann::json("caf\xC3\xA9")), "\"caf\\u00e9\"");
}
