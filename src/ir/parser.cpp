#include "ir/parser.h"

#include "ir/printer.h"
#include "ir/verifier.h"

#include <kiln/error.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kiln::ir {
namespace {

constexpr std::int64_t max_callbacks = 65536;
constexpr std::size_t max_list_entries = Shape::max_rank;

bool is_identifier_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_identifier_char(char c) { return is_identifier_start(c) || is_digit(c); }
bool is_name_char(char c) { return is_identifier_char(c) || c == '.' || c == '-'; }

class Parser {
 public:
  explicit Parser(std::string_view text, std::size_t start = 0, int depth = 0)
      : text_(text), pos_(start), depth_(depth) {}

  Graph run() {
    try {
      parse_function();
      skip_space();
      if (!at_end()) fail_expected("end of input after the function");
    } catch (const ParseError&) {
      throw;
    } catch (const Error& error) {
      // Not expected (every input is checked before it reaches code that
      // throws), but a kiln::Error from below must still read as a ParseError.
      fail(pos_, error.detail());
    }
    return std::move(graph_);
  }

 private:
  // ---- Errors ----

  [[noreturn]] void fail(std::size_t offset, const std::string& message) const {
    std::size_t line = 1, line_start = 0;
    for (std::size_t i = 0; i < offset && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        line += 1;
        line_start = i + 1;
      }
    }
    std::string where = std::to_string(line) + ":" + std::to_string(offset - line_start + 1) + ": ";
    throw ParseError("ir::parse", where + message, std::string());
  }

  // What the text holds at `offset`, for "expected X, got Y".
  std::string found(std::size_t offset) const {
    if (offset >= text_.size()) return "end of input";
    char c = text_[offset];
    if (is_identifier_char(c)) {
      std::size_t end = offset;
      while (end < text_.size() && end - offset < 24 && is_identifier_char(text_[end])) ++end;
      return "'" + std::string(text_.substr(offset, end - offset)) + "'";
    }
    auto byte = static_cast<unsigned char>(c);
    if (byte > 0x20 && byte < 0x7f) return std::string("'") + c + "'";
    static constexpr char hex[] = "0123456789abcdef";
    return std::string("byte 0x") + hex[byte >> 4] + hex[byte & 0xf];
  }

  [[noreturn]] void fail_expected(const std::string& expected) {
    skip_space();
    fail(pos_, "expected " + expected + ", got " + found(pos_));
  }

  // ---- Tokens ----

  bool at_end() const { return pos_ >= text_.size(); }

  void skip_space() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // The next character after whitespace, or '\0' at the end (a NUL byte in
  // the text reads the same, and matches nothing the grammar wants).
  char peek() {
    skip_space();
    return at_end() ? '\0' : text_[pos_];
  }

  bool accept(char c) {
    if (peek() != c || at_end()) return false;
    ++pos_;
    return true;
  }

  void expect(char c, const std::string& context) {
    if (!accept(c)) fail_expected(std::string("'") + c + "' " + context);
  }

  bool peek_keyword(std::string_view word) {
    skip_space();
    if (text_.substr(pos_, word.size()) != word) return false;
    std::size_t end = pos_ + word.size();
    return end >= text_.size() || !is_identifier_char(text_[end]);
  }

  std::string_view identifier(const std::string& expected) {
    skip_space();
    if (at_end() || !is_identifier_start(text_[pos_])) fail_expected(expected);
    std::size_t start = pos_;
    while (pos_ < text_.size() && is_identifier_char(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  std::int64_t integer(const std::string& expected) {
    skip_space();
    std::size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    if (at_end() || !is_digit(text_[pos_])) {
      pos_ = start;
      fail_expected(expected);
    }
    while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
    std::int64_t number = 0;
    auto result = std::from_chars(text_.data() + start, text_.data() + pos_, number);
    if (result.ec != std::errc() || result.ptr != text_.data() + pos_)
      fail(start, "integer " + std::string(text_.substr(start, std::min<std::size_t>(pos_ - start, 32))) +
                      (pos_ - start > 32 ? "..." : "") + " is out of range (int64)");
    return number;
  }

  bool boolean(const std::string& expected) {
    skip_space();
    std::size_t start = pos_;
    std::string_view word = identifier(expected);
    if (word == "true") return true;
    if (word == "false") return false;
    fail(start, "expected " + expected + ", got '" + std::string(word) + "'");
  }

  // "%N"; returns N.
  ValueId value(const std::string& expected) {
    if (peek() != '%') fail_expected(expected);
    std::size_t start = pos_++;
    if (at_end() || !is_digit(text_[pos_])) fail(pos_, "expected a value number after '%', got " + found(pos_));
    std::size_t digits = pos_;
    while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
    std::int64_t number = 0;
    auto result = std::from_chars(text_.data() + digits, text_.data() + pos_, number);
    if (result.ec != std::errc() || number >= std::numeric_limits<ValueId>::max())
      fail(start, "value number " + std::string(text_.substr(digits, std::min<std::size_t>(pos_ - digits, 32))) +
                      " is too large");
    return static_cast<ValueId>(number);
  }

  Type type() {
    skip_space();
    std::size_t start = pos_;
    std::string_view word = identifier("a type such as f32[2,3]");
    Type result;
    if (!parse_dtype(word, &result.dtype))
      fail(start, "unknown dtype '" + std::string(word) + "', expected bool, i32, i64, f32 or f64");
    expect('[', "to start the shape of the type");
    std::vector<std::int64_t> dims;
    if (!accept(']')) {
      while (true) {
        skip_space();
        std::size_t dim_start = pos_;
        if (dims.size() == static_cast<std::size_t>(Shape::max_rank))
          fail(dim_start, "rank exceeds the maximum " + std::to_string(Shape::max_rank));
        if (accept('?')) {
          dims.push_back(Shape::dynamic);
        } else {
          std::int64_t dim = integer("a dimension (a number or '?')");
          if (dim < 0) fail(dim_start, "dimension " + std::to_string(dim) + " is negative");
          dims.push_back(dim);
        }
        if (accept(',')) continue;
        if (accept(']')) break;
        fail_expected("',' or ']' in the shape");
      }
    }
    result.shape = Shape(dims);
    return result;
  }

  std::string string_literal() {
    skip_space();
    std::size_t start = pos_;
    if (!accept('"')) fail_expected("a string in quotes");
    std::string out;
    while (true) {
      if (at_end() || text_[pos_] == '\n') fail(start, "unterminated string");
      char c = text_[pos_];
      auto byte = static_cast<unsigned char>(c);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (byte < 0x20 || byte == 0x7f) fail(pos_, "unescaped " + found(pos_) + " in a string (write it as \\xHH)");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      std::size_t escape = pos_++;
      char kind = at_end() ? '\0' : text_[pos_++];
      if (kind == '"' || kind == '\\')
        out += kind;
      else if (kind == 'n')
        out += '\n';
      else if (kind == 't')
        out += '\t';
      else if (kind == 'x')
        out += hex_byte(escape);
      else
        fail(escape, "unknown escape in a string (use \\\", \\\\, \\n, \\t or \\xHH)");
    }
  }

  char hex_byte(std::size_t escape) {
    int byte = 0;
    for (int i = 0; i < 2; ++i) {
      char c = pos_ < text_.size() ? text_[pos_] : '\0';
      int digit = is_digit(c)              ? c - '0'
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                           : -1;
      if (digit < 0) fail(escape, "\\x needs two hex digits");
      byte = byte * 16 + digit;
      ++pos_;
    }
    return static_cast<char>(static_cast<unsigned char>(byte));
  }

  std::string location_if_any() {
    if (!peek_keyword("loc")) return {};
    pos_ += 3;
    expect('(', "after 'loc'");
    std::string location = string_literal();
    expect(')', "to close loc(\"...\")");
    return location;
  }

  // ---- Constants ----

  double float_constant() {
    skip_space();
    std::size_t start = pos_;
    bool negative = pos_ < text_.size() && text_[pos_] == '-';
    if (negative) ++pos_;
    if (!at_end() && is_identifier_start(text_[pos_])) {
      std::string_view word = identifier("a number");
      if (word == "inf")
        return negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
      if (word == "nan" && !negative) return std::numeric_limits<double>::quiet_NaN();
      fail(start, "expected a number, 'nan', 'inf' or '-inf' for a float constant, got '" +
                      std::string(text_.substr(start, pos_ - start)) + "'");
    }
    // The characters a decimal number can hold; from_chars decides the rest.
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      bool exponent_sign = (c == '+' || c == '-') && pos_ > start && (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E');
      if (!is_digit(c) && c != '.' && c != 'e' && c != 'E' && !exponent_sign) break;
      ++pos_;
    }
    if (pos_ == start + (negative ? 1 : 0)) {
      pos_ = start;
      fail_expected("a number, 'nan', 'inf' or '-inf' for a float constant");
    }
    double number = 0;
    auto result = std::from_chars(text_.data() + start, text_.data() + pos_, number);
    std::string spelled(text_.substr(start, std::min<std::size_t>(pos_ - start, 32)));
    if (result.ec == std::errc::result_out_of_range)
      fail(start, "float constant " + spelled + " is out of range (f64)");
    if (result.ec != std::errc() || result.ptr != text_.data() + pos_)
      fail(start, "malformed float constant '" + spelled + "'");
    return number;
  }

  void constant_value(Node& node) {
    DType dtype = node.type.dtype;
    if (is_floating(dtype))
      node.attributes.float_value = float_constant();
    else if (dtype == DType::boolean)
      node.attributes.int_value = boolean("'true' or 'false' for a bool constant");
    else
      node.attributes.int_value = integer("an integer for an " + std::string(to_string(dtype)) + " constant");
  }

  // ---- Attributes ----

  void attributes(Node& node) {
    std::string op_name(name(node.op));
    std::span<const AttributeField> fields = attribute_fields(info(node.op).attributes);
    if (fields.empty()) {
      if (peek() == '{') fail(pos_, op_name + " takes no attributes");
      return;
    }
    std::string example = " {";
    for (std::size_t i = 0; i < fields.size(); ++i) example += (i ? ", " : "") + std::string(fields[i].key) + "=...";
    example += "}";
    expect('{', "to open the attributes of " + op_name + example);
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const AttributeField& field = fields[i];
      std::string key(field.key);
      if (i) expect(',', "before attribute '" + key + "' of " + op_name + example);
      skip_space();
      std::size_t key_start = pos_;
      std::string_view word = identifier("attribute '" + key + "' of " + op_name + example);
      if (word != field.key)
        fail(key_start,
             "expected attribute '" + key + "' of " + op_name + example + ", got '" + std::string(word) + "'");
      expect('=', "after '" + key + "'");
      switch (field.form) {
        case AttributeField::Form::integer: {
          skip_space();
          std::size_t number_start = pos_;
          std::int64_t number = integer("an integer for '" + key + "'");
          if (node.op == Op::host_call && number >= max_callbacks)
            fail(number_start, "callback index " + std::to_string(number) + " exceeds the limit " +
                                   std::to_string(max_callbacks - 1));
          node.attributes.*field.integer = number;
          break;
        }
        case AttributeField::Form::boolean:
          node.attributes.*field.boolean = boolean("'true' or 'false' for '" + key + "'");
          break;
        case AttributeField::Form::list:
          node.attributes.*field.list = integer_list(key);
          break;
      }
    }
    expect('}', "to close the attributes of " + op_name);
  }

  std::vector<std::int64_t> integer_list(const std::string& key) {
    expect('[', "to start the list '" + key + "'");
    std::vector<std::int64_t> values;
    if (accept(']')) return values;
    while (true) {
      skip_space();
      if (values.size() == max_list_entries)
        fail(pos_, "list '" + key + "' has more than " + std::to_string(max_list_entries) + " entries");
      values.push_back(integer("an integer in the list '" + key + "'"));
      if (accept(',')) continue;
      if (accept(']')) return values;
      fail_expected("',' or ']' in the list '" + key + "'");
    }
  }

  // ---- Structure ----

  // One function, from `func` to its closing brace: the whole text, or a control node's region.
  void parse_function() {
    parse_header();
    parse_body();
    check_graph();
  }

  // A control node's regions: "regions(" function { function } ")", each parsed by a parser of its own (the one
  // place the parser recurses, as deep as regions nest: at most max_region_depth).
  void regions(Node& node) {
    if (!peek_keyword("regions")) return;
    static constexpr int max_region_depth = 32;
    if (depth_ >= max_region_depth)
      fail(pos_, "regions nest deeper than " + std::to_string(max_region_depth) + " levels");
    pos_ += 7;
    expect('(', "to open the regions");
    do {
      skip_space();
      Parser region(text_, pos_, depth_ + 1);
      region.parse_function();
      node.regions.push_back(std::move(region.graph_));
      pos_ = region.pos_;
    } while (!accept(')'));
  }

  void parse_header() {
    if (!peek_keyword("func")) fail_expected("'func' to start a function");
    pos_ += 4;
    expect('@', "before the function name");
    if (peek() == '"') {
      graph_.name = string_literal();
    } else {
      std::size_t start = pos_;
      while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
      if (pos_ == start) fail_expected("a function name after '@'");
      graph_.name = std::string(text_.substr(start, pos_ - start));
    }
    expect('(', "to open the parameter list");
    if (!accept(')')) {
      while (true) {
        parameter();
        if (accept(',')) continue;
        if (accept(')')) break;
        fail_expected("',' or ')' in the parameter list");
      }
    }
    skip_space();
    if (text_.substr(pos_, 2) != "->") fail_expected("'->' before the output types");
    pos_ += 2;
    expect('(', "to open the output types");
    if (!accept(')')) {
      while (true) {
        output_types_.push_back(type());
        if (accept(',')) continue;
        if (accept(')')) break;
        fail_expected("',' or ')' in the output types");
      }
    }
    expect('{', "to open the function body");
  }

  void parameter() {
    skip_space();
    std::size_t start = pos_;
    ValueId id = value("a parameter '%N: type'");
    auto expected = static_cast<ValueId>(graph_.parameters.size());
    if (id != expected)
      fail(start, "expected %" + std::to_string(expected) + " (parameters are numbered from %0 in order), got %" +
                      std::to_string(id));
    expect(':', "after the parameter's name");
    ValueId added = graph_.add_parameter(type());
    graph_.node(added).location = location_if_any();
    node_offsets_.push_back(start);
  }

  void parse_body() {
    while (true) {
      char next = peek();
      if (next == '%' && !at_end()) {
        node();
      } else if (peek_keyword("return")) {
        break;
      } else if (next == '}' && !at_end()) {
        fail(pos_, "missing 'return' before '}'");
      } else {
        fail_expected("a node '%N = type op(...)' or 'return'");
      }
    }
    return_offset_ = pos_;
    pos_ += 6;
    if (peek() == '%') {
      while (true) {
        skip_space();
        std::size_t start = pos_;
        ValueId output = value("a value to return");
        if (output >= graph_.size()) fail(start, "%" + std::to_string(output) + " is not defined");
        graph_.outputs.push_back(output);
        output_offsets_.push_back(start);
        if (!accept(',')) break;
      }
    }
    expect('}', "to close the function body");
  }

  void node() {
    std::size_t start = pos_;
    ValueId id = value("a node");
    auto expected = static_cast<ValueId>(graph_.size());
    if (id < expected)
      fail(start,
           "%" + std::to_string(id) + " is already defined (duplicate value); expected %" + std::to_string(expected));
    if (id > expected)
      fail(start, "expected %" + std::to_string(expected) + " (values are numbered consecutively), got %" +
                      std::to_string(id));
    expect('=', "after %" + std::to_string(id));
    Node node;
    node.type = type();
    skip_space();
    std::size_t op_start = pos_;
    std::string_view word = identifier("an op name");
    std::optional<Op> op = op_from_name(word);
    if (!op) fail(op_start, "unknown op '" + std::string(word) + "'");
    if (*op == Op::parameter) fail(op_start, "parameters are declared in the function header, not in the body");
    node.op = *op;
    expect('(', "after the op name");
    if (node.op == Op::constant) {
      constant_value(node);
      expect(')', "after the constant's value");
    } else if (!accept(')')) {
      while (true) {
        skip_space();
        std::size_t operand_start = pos_;
        ValueId operand = value("an operand '%N'");
        if (operand >= id) fail(operand_start, "%" + std::to_string(operand) + " is used before it is defined");
        node.operands.push_back(operand);
        if (accept(',')) continue;
        if (accept(')')) break;
        fail_expected("',' or ')' after an operand");
      }
    }
    attributes(node);
    node.location = location_if_any();
    regions(node);
    if (node.op == Op::host_call && node.attributes.index >= 0)
      host_function_count_ = std::max(host_function_count_, node.attributes.index + 1);
    graph_.add(std::move(node));
    node_offsets_.push_back(start);
  }

  void check_graph() {
    graph_.host_functions.resize(static_cast<std::size_t>(host_function_count_));
    if (auto failure = find_verifier_failure(graph_)) {
      std::size_t offset = return_offset_;
      if (failure->value >= 0 && static_cast<std::size_t>(failure->value) < node_offsets_.size())
        offset = node_offsets_[static_cast<std::size_t>(failure->value)];
      fail(offset, failure->detail);
    }
    if (output_types_.size() != graph_.outputs.size())
      fail(return_offset_, "the header declares " + std::to_string(output_types_.size()) + " outputs, but return has " +
                               std::to_string(graph_.outputs.size()));
    for (std::size_t i = 0; i < output_types_.size(); ++i) {
      const Type& returned = graph_.type(graph_.outputs[i]);
      if (!(returned == output_types_[i]))
        fail(output_offsets_[i], "%" + std::to_string(graph_.outputs[i]) + " has type " + returned.to_string() +
                                     ", but the header declares output " + std::to_string(i) + " as " +
                                     output_types_[i].to_string());
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  int depth_ = 0;  // how deep in regions this function is
  Graph graph_;
  std::vector<std::size_t> node_offsets_;    // where each node's text starts
  std::vector<Type> output_types_;           // declared in the header
  std::vector<std::size_t> output_offsets_;  // of each value after `return`
  std::size_t return_offset_ = 0;
  std::int64_t host_function_count_ = 0;
};

}  // namespace

Graph parse(std::string_view text) { return Parser(text).run(); }

}  // namespace kiln::ir
