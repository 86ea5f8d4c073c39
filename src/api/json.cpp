#include "api/json.h"

#include <limits>
#include <stdexcept>
#include <unordered_set>

namespace kiln::detail::json {
namespace {

// Deep enough for any real header, shallow enough that recursion cannot
// overflow the stack on a hostile one.
constexpr int deepest_nesting = 64;

// Thrown inside the parser only; parse() turns it into its error string.
class SyntaxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Value document() {
    Value value = parse_value(0);
    skip_whitespace();
    if (position_ != text_.size()) fail("unexpected text after the value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw SyntaxError(what + " at byte " + std::to_string(position_));
  }
  bool at_end() const { return position_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[position_]; }
  void skip_whitespace() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++position_;
  }
  void expect(char wanted) {
    skip_whitespace();
    if (at_end() || peek() != wanted) fail(std::string("expected '") + wanted + "'");
    ++position_;
  }

  Value parse_value(int depth) {
    skip_whitespace();
    if (at_end()) fail("expected a value");
    Value value;
    switch (peek()) {
      case '{':
        return parse_object(depth + 1);
      case '[':
        return parse_array(depth + 1);
      case '"':
        value.kind = Value::Kind::string;
        value.text = parse_string();
        return value;
      case 't':
        parse_word("true");
        value.kind = Value::Kind::boolean;
        value.boolean = true;
        return value;
      case 'f':
        parse_word("false");
        value.kind = Value::Kind::boolean;
        return value;
      case 'n':
        parse_word("null");
        return value;
      default:
        break;
    }
    if (peek() == '-' || (peek() >= '0' && peek() <= '9')) {
      value.kind = Value::Kind::number;
      value.text = parse_number();
      return value;
    }
    fail(std::string("unexpected character '") + peek() + "'");
  }

  Value parse_object(int depth) {
    if (depth > deepest_nesting) fail("nesting deeper than " + std::to_string(deepest_nesting));
    Value object;
    object.kind = Value::Kind::object;
    ++position_;  // '{'
    skip_whitespace();
    if (peek() == '}') {
      ++position_;
      return object;
    }
    std::unordered_set<std::string> keys;
    while (true) {
      skip_whitespace();
      if (peek() != '"') fail("expected a string key");
      std::string key = parse_string();
      if (!keys.insert(key).second) fail("repeated key \"" + key + "\"");
      expect(':');
      object.members.emplace_back(std::move(key), parse_value(depth));
      skip_whitespace();
      if (peek() == ',') {
        ++position_;
        continue;
      }
      expect('}');
      return object;
    }
  }

  Value parse_array(int depth) {
    if (depth > deepest_nesting) fail("nesting deeper than " + std::to_string(deepest_nesting));
    Value array;
    array.kind = Value::Kind::array;
    ++position_;  // '['
    skip_whitespace();
    if (peek() == ']') {
      ++position_;
      return array;
    }
    while (true) {
      array.elements.push_back(parse_value(depth));
      skip_whitespace();
      if (peek() == ',') {
        ++position_;
        continue;
      }
      expect(']');
      return array;
    }
  }

  void parse_word(std::string_view word) {
    if (text_.substr(position_, word.size()) != word) fail("expected " + std::string(word));
    position_ += word.size();
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  std::string parse_number() {
    const std::size_t start = position_;
    auto digits = [&] {
      const std::size_t first = position_;
      while (peek() >= '0' && peek() <= '9') ++position_;
      if (position_ == first) fail("expected a digit");
    };
    if (peek() == '-') ++position_;
    if (peek() == '0') {
      ++position_;
      if (peek() >= '0' && peek() <= '9') fail("a number with a leading zero");
    } else {
      digits();
    }
    if (peek() == '.') {
      ++position_;
      digits();
    }
    if (peek() == 'e' || peek() == 'E') {
      ++position_;
      if (peek() == '+' || peek() == '-') ++position_;
      digits();
    }
    return std::string(text_.substr(start, position_ - start));
  }

  unsigned hex_quad() {
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      unsigned digit;
      if (c >= '0' && c <= '9')
        digit = static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        digit = static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        digit = static_cast<unsigned>(c - 'A' + 10);
      else
        fail("expected four hex digits after \\u");
      code = code * 16 + digit;
      ++position_;
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xc0 | code >> 6);
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xe0 | code >> 12);
      out += static_cast<char>(0x80 | (code >> 6 & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | code >> 18);
      out += static_cast<char>(0x80 | (code >> 12 & 0x3f));
      out += static_cast<char>(0x80 | (code >> 6 & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    }
  }

  // One UTF-8 encoded character starting at a byte >= 0x80, checked: no
  // overlong forms, no surrogates, nothing above U+10FFFF.
  void copy_utf8_character(std::string& out) {
    const auto lead = static_cast<unsigned char>(peek());
    int continuation;
    unsigned code;
    if (lead >= 0xc2 && lead <= 0xdf)
      continuation = 1, code = lead & 0x1fu;
    else if (lead >= 0xe0 && lead <= 0xef)
      continuation = 2, code = lead & 0x0fu;
    else if (lead >= 0xf0 && lead <= 0xf4)
      continuation = 3, code = lead & 0x07u;
    else
      fail("invalid UTF-8");
    const std::size_t start = position_++;
    for (int i = 0; i < continuation; ++i) {
      const auto byte = static_cast<unsigned char>(peek());
      if ((byte & 0xc0) != 0x80) fail("invalid UTF-8");
      code = code << 6 | (byte & 0x3fu);
      ++position_;
    }
    const unsigned smallest = continuation == 1 ? 0x80 : continuation == 2 ? 0x800 : 0x10000;
    if (code < smallest || (code >= 0xd800 && code <= 0xdfff) || code > 0x10ffff) {
      position_ = start;
      fail("invalid UTF-8");
    }
    out.append(text_.substr(start, position_ - start));
  }

  std::string parse_string() {
    ++position_;  // '"'
    std::string out;
    while (true) {
      if (at_end()) fail("an unterminated string");
      const auto c = static_cast<unsigned char>(peek());
      if (c == '"') {
        ++position_;
        return out;
      }
      if (c < 0x20) fail("a control character in a string");
      if (c >= 0x80) {
        copy_utf8_character(out);
        continue;
      }
      ++position_;
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      const char escape = peek();
      ++position_;
      switch (escape) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned code = hex_quad();
          if (code >= 0xdc00 && code <= 0xdfff) fail("a lone low surrogate");
          if (code >= 0xd800 && code <= 0xdbff) {
            if (text_.substr(position_, 2) != "\\u") fail("a high surrogate without its low surrogate");
            position_ += 2;
            const unsigned low = hex_quad();
            if (low < 0xdc00 || low > 0xdfff) fail("a high surrogate without its low surrogate");
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          }
          append_utf8(out, code);
          break;
        }
        default:
          --position_;
          fail("an unknown escape");
      }
    }
  }

  std::string_view text_;
  std::size_t position_ = 0;
};

}  // namespace

bool Value::to_unsigned(std::uint64_t* value) const {
  if (kind != Kind::number || text.empty() || text[0] == '-') return false;
  std::uint64_t result = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;  // a fraction or an exponent
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (result > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return false;
    result = result * 10 + digit;
  }
  *value = result;
  return true;
}

const char* describe(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::null:
      return "null";
    case Value::Kind::boolean:
      return "a boolean";
    case Value::Kind::number:
      return "a number";
    case Value::Kind::string:
      return "a string";
    case Value::Kind::array:
      return "an array";
    case Value::Kind::object:
      return "an object";
  }
  return "a value";
}

bool parse(std::string_view text, Value* value, std::string* error) {
  try {
    *value = Parser(text).document();
    return true;
  } catch (const SyntaxError& syntax_error) {
    *error = syntax_error.what();
    return false;
  }
}

std::string quote(std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      out += "\\u00";
      out += hex[byte >> 4];
      out += hex[byte & 0xf];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace kiln::detail::json
