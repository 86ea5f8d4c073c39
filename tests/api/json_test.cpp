// The strict JSON reader behind load_safetensors (src/api/json.h): what it
// accepts, and that it refuses everything RFC 8259 does not allow.

#include "api/json.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln::detail::json {
namespace {

Value parsed(std::string_view text) {
  Value value;
  std::string error;
  EXPECT_TRUE(parse(text, &value, &error)) << text << ": " << error;
  return value;
}

std::string error_for(std::string_view text) {
  Value value;
  std::string error;
  EXPECT_FALSE(parse(text, &value, &error)) << "accepted: " << text;
  return error;
}

TEST(Json, ParsesEveryKindKeepingMemberOrder) {
  const Value value =
      parsed(" {\"z\": [1, -2.5e3, 0], \"a\": {\"t\": true, \"f\": false, \"n\": null}, \"s\": \"x\"}\r\n\t");
  ASSERT_EQ(value.kind, Value::Kind::object);
  ASSERT_EQ(value.members.size(), 3u);
  EXPECT_EQ(value.members[0].first, "z");
  EXPECT_EQ(value.members[1].first, "a");
  EXPECT_EQ(value.members[2].first, "s");
  const Value& numbers = value.members[0].second;
  ASSERT_EQ(numbers.elements.size(), 3u);
  EXPECT_EQ(numbers.elements[1].kind, Value::Kind::number);
  EXPECT_EQ(numbers.elements[1].text, "-2.5e3");
  const Value& words = value.members[1].second;
  EXPECT_TRUE(words.members[0].second.boolean);
  EXPECT_EQ(words.members[1].second.kind, Value::Kind::boolean);
  EXPECT_FALSE(words.members[1].second.boolean);
  EXPECT_EQ(words.members[2].second.kind, Value::Kind::null);
  EXPECT_EQ(value.members[2].second.text, "x");
  EXPECT_EQ(parsed("[]").elements.size(), 0u);
  EXPECT_EQ(parsed("{}").members.size(), 0u);
}

TEST(Json, ResolvesEscapesAndChecksUtf8) {
  EXPECT_EQ(parsed(R"("\" \\ \/ \b \f \n \r \t")").text, "\" \\ / \b \f \n \r \t");
  EXPECT_EQ(parsed(R"("caf\u00e9 \u20ac \ud83d\ude00")").text, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(parsed("\"caf\xc3\xa9 \xf0\x9f\x98\x80\"").text, "caf\xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_EQ(error_for(R"("\ude00")"), "a lone low surrogate at byte 7");
  EXPECT_EQ(error_for(R"("\ud83d")"), "a high surrogate without its low surrogate at byte 7");
  EXPECT_EQ(error_for(R"("\ud83d\u0041")"), "a high surrogate without its low surrogate at byte 13");
  EXPECT_EQ(error_for(R"("\x")"), "an unknown escape at byte 2");
  EXPECT_EQ(error_for(R"("\u12g4")"), "expected four hex digits after \\u at byte 5");
  EXPECT_EQ(error_for("\"\xc0\xaf\""), "invalid UTF-8 at byte 1");          // an overlong '/'
  EXPECT_EQ(error_for("\"\xed\xa0\x80\""), "invalid UTF-8 at byte 1");      // an encoded surrogate
  EXPECT_EQ(error_for("\"\xf4\x90\x80\x80\""), "invalid UTF-8 at byte 1");  // above U+10FFFF
  EXPECT_EQ(error_for("\"\xe2\x82\""), "invalid UTF-8 at byte 3");          // cut short
  EXPECT_EQ(error_for("\"tab\there\""), "a control character in a string at byte 4");
  EXPECT_EQ(error_for("\"open"), "an unterminated string at byte 5");
}

TEST(Json, RefusesWhatIsNotStrictJson) {
  EXPECT_EQ(error_for(""), "expected a value at byte 0");
  EXPECT_EQ(error_for("[1,]"), "unexpected character ']' at byte 3");
  EXPECT_EQ(error_for("{\"a\":1,}"), "expected a string key at byte 7");
  EXPECT_EQ(error_for("{'a':1}"), "expected a string key at byte 1");
  EXPECT_EQ(error_for("{\"a\" 1}"), "expected ':' at byte 5");
  EXPECT_EQ(error_for("{\"a\":1 \"b\":2}"), "expected '}' at byte 7");
  EXPECT_EQ(error_for("{\"a\":1,\"a\":2}"), "repeated key \"a\" at byte 10");
  EXPECT_EQ(error_for("[1] [2]"), "unexpected text after the value at byte 4");
  EXPECT_EQ(error_for("01"), "a number with a leading zero at byte 1");
  EXPECT_EQ(error_for("1."), "expected a digit at byte 2");
  EXPECT_EQ(error_for("-"), "expected a digit at byte 1");
  EXPECT_EQ(error_for("1e"), "expected a digit at byte 2");
  EXPECT_EQ(error_for("+1"), "unexpected character '+' at byte 0");
  EXPECT_EQ(error_for("tru"), "expected true at byte 0");
  EXPECT_EQ(error_for("NaN"), "unexpected character 'N' at byte 0");
  EXPECT_EQ(parsed(std::string(64, '[') + std::string(64, ']')).kind, Value::Kind::array);
  EXPECT_EQ(error_for(std::string(65, '[') + std::string(65, ']')), "nesting deeper than 64 at byte 64");
}

TEST(Json, ReadsNonNegativeIntegersOnly) {
  std::uint64_t value = 0;
  EXPECT_TRUE(parsed("18446744073709551615").to_unsigned(&value));
  EXPECT_EQ(value, 18446744073709551615u);
  EXPECT_TRUE(parsed("0").to_unsigned(&value));
  EXPECT_EQ(value, 0u);
  for (const char* text : {"18446744073709551616", "-1", "1.0", "1e3", "\"1\"", "true"})
    EXPECT_FALSE(parsed(text).to_unsigned(&value)) << text;
}

TEST(Json, QuoteWritesWhatParseReadsBack) {
  const std::string text = "name \"quoted\" \\ \n \x01 caf\xc3\xa9";
  EXPECT_EQ(quote(text), "\"name \\\"quoted\\\" \\\\ \\u000a \\u0001 caf\xc3\xa9\"");
  EXPECT_EQ(parsed(quote(text)).text, text);
}

}  // namespace
}  // namespace kiln::detail::json
