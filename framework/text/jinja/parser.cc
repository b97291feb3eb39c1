// Lexer and parser of the chat-template subset. Two stages: the source is cut into text and tags
// (with jinja2's whitespace control: `-` on a tag strips whitespace beside it, trim_blocks drops
// the newline after a block or comment tag, lstrip_blocks drops the spaces and tabs before one
// at the start of a line), then each tag's contents are tokenized and parsed by recursive
// descent with jinja2's operator precedence.
#include <cctype>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "framework/core/error.h"
#include "framework/text/jinja/ast.h"
#include "framework/text/jinja/limits.h"

namespace mg::text::jinja {

namespace {

// ---- Stage 1: text and tags
// ----------------------------------------------------------------------

struct Segment {
  enum class Kind { kText, kOutput, kStatement };
  Kind kind;
  std::string text;  // the text, or the tag's contents without delimiters and `-`/`+`
  int line;
};

int count_lines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

bool only_spaces_or_tabs(std::string_view s) {
  for (char c : s) {
    if (c != ' ' && c != '\t') return false;
  }
  return true;
}

void strip_trailing_whitespace(std::string& s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
}

// Finds the end of a tag opened at `pos` (after its opening delimiter): the closing delimiter
// outside string literals.
size_t find_tag_end(std::string_view src, size_t pos, std::string_view close, int line) {
  char quote = 0;
  for (size_t i = pos; i < src.size(); ++i) {
    const char c = src[i];
    if (quote != 0) {
      if (c == '\\') {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    if (close != "#}" && (c == '\'' || c == '"')) {
      quote = c;
      continue;
    }
    if (src.compare(i, close.size(), close) == 0) return i;
  }
  MG_FAIL("line {}: a tag is not closed (expected '{}')", line, close);
}

std::vector<Segment> split_segments(std::string_view src) {
  // jinja2 (keep_trailing_newline=False) drops one trailing newline of the template.
  if (src.ends_with("\r\n")) {
    src.remove_suffix(2);
  } else if (src.ends_with("\n")) {
    src.remove_suffix(1);
  }
  std::vector<Segment> out;
  size_t pos = 0;
  int line = 1;
  bool strip_next_text = false;    // the previous tag ended with '-'
  bool trim_next_newline = false;  // the previous tag was a block/comment tag (trim_blocks)
  bool line_starting = true;       // what precedes the next text begins a line
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string_view::npos && open + 1 < src.size() && src[open + 1] != '{' &&
           src[open + 1] != '%' && src[open + 1] != '#') {
      open = src.find('{', open + 1);
    }
    if (open != std::string_view::npos && open + 1 >= src.size()) open = std::string_view::npos;
    std::string text(src.substr(pos, open == std::string_view::npos ? src.npos : open - pos));
    const int text_line = line;
    line += count_lines(text);
    if (trim_next_newline && text.starts_with("\n")) {
      text.erase(0, 1);
      line_starting = true;
    } else if (trim_next_newline && text.starts_with("\r\n")) {
      text.erase(0, 2);
      line_starting = true;
    }
    if (strip_next_text) {
      size_t i = 0;
      while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
      text.erase(0, i);
    }
    if (open == std::string_view::npos) {
      if (!text.empty()) out.push_back({Segment::Kind::kText, std::move(text), text_line});
      break;
    }
    const char type = src[open + 1];
    const std::string_view close = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
    size_t body_begin = open + 2;
    const bool strip_before = body_begin < src.size() && src[body_begin] == '-';
    const bool keep_before = body_begin < src.size() && src[body_begin] == '+';
    if (strip_before || keep_before) ++body_begin;
    if (strip_before) {
      strip_trailing_whitespace(text);
    } else if (type != '{' && !keep_before) {
      // lstrip_blocks: spaces and tabs between the line's start and the tag go.
      const size_t nl = text.rfind('\n');
      const size_t from = nl == std::string::npos ? 0 : nl + 1;
      if ((nl != std::string::npos || line_starting) && only_spaces_or_tabs(text.substr(from))) {
        text.erase(from);
      }
    }
    if (!text.empty()) out.push_back({Segment::Kind::kText, std::move(text), text_line});
    const size_t end = find_tag_end(src, body_begin, close, line);
    size_t body_end = end;
    strip_next_text = false;
    bool keep_after = false;
    if (body_end > body_begin && src[body_end - 1] == '-') {
      strip_next_text = true;
      --body_end;
    } else if (body_end > body_begin && src[body_end - 1] == '+') {
      keep_after = true;
      --body_end;
    }
    const std::string_view body = src.substr(body_begin, body_end - body_begin);
    if (type == '{') {
      out.push_back({Segment::Kind::kOutput, std::string(body), line});
    } else if (type == '%') {
      out.push_back({Segment::Kind::kStatement, std::string(body), line});
    }
    line += count_lines(src.substr(open, end + 2 - open));
    trim_next_newline = type != '{' && !keep_after;
    line_starting = false;
    pos = end + 2;
  }
  return out;
}

// ---- Stage 2: tokens of a tag
// ----------------------------------------------------------------------

struct Token {
  enum class Kind { kName, kInt, kFloat, kString, kOp, kEnd };
  Kind kind;
  std::string text;  // name, operator, or the string's decoded value
  int64_t int_value = 0;
  double float_value = 0;
};

std::vector<Token> tokenize(std::string_view s, int line) {
  static constexpr std::string_view kOps2[] = {"==", "!=", "<=", ">=", "//", "**"};
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Kind::kName, std::string(s.substr(i, j - i))});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          is_float = true;
          j = k;
          while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        }
      }
      std::string digits;
      for (size_t k = i; k < j; ++k) {
        if (s[k] != '_') digits += s[k];
      }
      Token t{is_float ? Token::Kind::kFloat : Token::Kind::kInt, digits};
      if (is_float) {
        // As Python's float(): past the range is inf, below it 0 (std::stod threw out_of_range
        // there: found by fuzz_chat_template).
        t.float_value = std::strtod(digits.c_str(), nullptr);
      } else {
        auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), t.int_value);
        MG_CHECK(ec == std::errc(), "line {}: integer literal {} is out of range", line, digits);
      }
      out.push_back(std::move(t));
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string value;
      size_t j = i + 1;
      for (;; ++j) {
        MG_CHECK(j < s.size(), "line {}: a string literal is not closed", line);
        if (s[j] == c) break;
        if (s[j] == '\\' && j + 1 < s.size()) {
          ++j;
          switch (s[j]) {
            case 'n':
              value += '\n';
              break;
            case 't':
              value += '\t';
              break;
            case 'r':
              value += '\r';
              break;
            case '\\':
            case '\'':
            case '"':
              value += s[j];
              break;
            default:
              MG_FAIL("line {}: the escape \\{} in a string literal is not supported", line, s[j]);
          }
          continue;
        }
        value += s[j];
      }
      out.push_back({Token::Kind::kString, std::move(value)});
      i = j + 1;
      continue;
    }
    bool matched = false;
    for (std::string_view op : kOps2) {
      if (s.compare(i, 2, op) == 0) {
        out.push_back({Token::Kind::kOp, std::string(op)});
        i += 2;
        matched = true;
        break;
      }
    }
    if (matched) continue;
    MG_CHECK(std::string_view("()[]{}.,:|~+-*/%=<>").find(c) != std::string_view::npos,
             "line {}: unexpected character '{}' in a tag", line, c);
    out.push_back({Token::Kind::kOp, std::string(1, c)});
    ++i;
  }
  out.push_back({Token::Kind::kEnd, ""});
  return out;
}

// ---- Stage 3: expressions
// ------------------------------------------------------------------------

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, int line) : tokens_(std::move(tokens)), line_(line) {}

  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  bool at_end() const { return peek().kind == Token::Kind::kEnd; }
  bool is_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kOp && peek(ahead).text == op;
  }
  bool is_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::kName && peek(ahead).text == name;
  }
  bool accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    ++pos_;
    return true;
  }
  bool accept_name(std::string_view name) {
    if (!is_name(name)) return false;
    ++pos_;
    return true;
  }
  void expect_op(std::string_view op) {
    MG_CHECK(accept_op(op), "line {}: expected '{}', got '{}'", line_, op, describe(peek()));
  }
  std::string expect_name() {
    MG_CHECK(peek().kind == Token::Kind::kName, "line {}: expected a name, got '{}'", line_,
             describe(peek()));
    return tokens_[pos_++].text;
  }
  void expect_end(std::string_view what) {
    MG_CHECK(at_end(), "line {}: unexpected '{}' after {}", line_, describe(peek()), what);
  }
  static std::string describe(const Token& t) {
    return t.kind == Token::Kind::kEnd ? "end of tag" : t.text;
  }

  // expression with an optional `if ... else ...`
  ExprPtr parse_expression(bool with_conditional = true) {
    const DepthGuard guard = nest();
    ExprPtr e = parse_or();
    while (with_conditional && is_name("if")) {
      ++pos_;
      auto cond = make(Expr::Kind::kConditional);
      cond->a = std::move(e);
      cond->b = parse_or();
      if (accept_name("else")) cond->c = parse_expression();
      e = std::move(cond);
    }
    return e;
  }

  // `a, b` without brackets: a tuple (a list value) when there is a comma.
  ExprPtr parse_tuple_or_expression() {
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    auto list = make(Expr::Kind::kList);
    list->items.push_back(std::move(first));
    while (accept_op(",")) {
      if (at_end()) break;
      list->items.push_back(parse_expression());
    }
    return list;
  }

  // Assignment targets: `a` or `a, b` (names only).
  std::vector<std::string> parse_targets() {
    std::vector<std::string> names{expect_name()};
    while (accept_op(",")) names.push_back(expect_name());
    return names;
  }

 private:
  // Recursive descent recurses once per nesting level of the source ('((((x))))', 'not not x',
  // '- - x'): bounded, so a hostile template cannot overflow the stack.
  DepthGuard nest() {
    return DepthGuard(depth_, kMaxParseDepth, fmt::format("line {}: expressions", line_));
  }

  ExprPtr make(Expr::Kind kind) {
    // Chains like `a + b + c + ...` grow the tree without recursing here; the node count bounds
    // their depth (evaluating and destroying the tree recurse along it).
    MG_CHECK(++nodes_ <= kMaxExprNodes, "line {}: an expression of more than {} parts", line_,
             kMaxExprNodes);
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line_;
    return e;
  }
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::kBinary);
    e->name = std::move(op);
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (accept_name("or")) e = binary("or", std::move(e), parse_and());
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (accept_name("and")) e = binary("and", std::move(e), parse_not());
    return e;
  }
  ExprPtr parse_not() {
    const DepthGuard guard = nest();
    if (accept_name("not")) {
      auto e = make(Expr::Kind::kUnary);
      e->name = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    for (;;) {
      std::string op;
      for (std::string_view candidate : {"==", "!=", "<", "<=", ">", ">="}) {
        if (is_op(candidate)) op = candidate;
      }
      if (!op.empty()) {
        ++pos_;
      } else if (accept_name("in")) {
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        pos_ += 2;
        op = "not in";
      } else {
        return e;
      }
      e = binary(op, std::move(e), parse_math1());
    }
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    for (;;) {
      if (accept_op("+")) {
        e = binary("+", std::move(e), parse_concat());
      } else if (accept_op("-")) {
        e = binary("-", std::move(e), parse_concat());
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (accept_op("~")) e = binary("~", std::move(e), parse_math2());
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    for (;;) {
      std::string op;
      for (std::string_view candidate : {"*", "/", "//", "%"}) {
        if (is_op(candidate)) op = candidate;
      }
      if (op.empty()) return e;
      ++pos_;
      e = binary(op, std::move(e), parse_pow());
    }
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary();
    while (accept_op("**")) e = binary("**", std::move(e), parse_unary());
    return e;
  }
  ExprPtr parse_unary() {
    const DepthGuard guard = nest();
    if (is_op("-") || is_op("+")) {
      auto e = make(Expr::Kind::kUnary);
      e->name = tokens_[pos_++].text;
      e->a = parse_unary();
      return parse_filters_and_tests(std::move(e));
    }
    return parse_filters_and_tests(parse_postfix(parse_primary()));
  }

  void parse_call_args(Expr& call) {
    // after '('
    if (accept_op(")")) return;
    for (;;) {
      if (peek().kind == Token::Kind::kName && is_op("=", 1)) {
        std::string key = expect_name();
        ++pos_;
        call.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        MG_CHECK(call.kwargs.empty(), "line {}: a positional argument follows a keyword argument",
                 line_);
        call.items.push_back(parse_expression());
      }
      if (accept_op(")")) return;
      expect_op(",");
      if (accept_op(")")) return;
    }
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case Token::Kind::kName: {
        ++pos_;
        auto e = make(Expr::Kind::kLiteral);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value::boolean(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value::boolean(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::none();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      }
      case Token::Kind::kInt: {
        ++pos_;
        auto e = make(Expr::Kind::kLiteral);
        e->literal = Value::integer(t.int_value);
        return e;
      }
      case Token::Kind::kFloat: {
        ++pos_;
        auto e = make(Expr::Kind::kLiteral);
        e->literal = Value::real(t.float_value);
        return e;
      }
      case Token::Kind::kString: {
        // Adjacent string literals concatenate, as in Python.
        std::string s;
        while (peek().kind == Token::Kind::kString) s += tokens_[pos_++].text;
        auto e = make(Expr::Kind::kLiteral);
        e->literal = Value::string(std::move(s));
        return e;
      }
      case Token::Kind::kOp: {
        if (accept_op("(")) {
          if (accept_op(")")) return make(Expr::Kind::kList);  // empty tuple
          ExprPtr first = parse_expression();
          if (accept_op(")")) return first;
          auto list = make(Expr::Kind::kList);
          list->items.push_back(std::move(first));
          while (accept_op(",")) {
            if (is_op(")")) break;
            list->items.push_back(parse_expression());
          }
          expect_op(")");
          return list;
        }
        if (accept_op("[")) {
          auto list = make(Expr::Kind::kList);
          while (!accept_op("]")) {
            list->items.push_back(parse_expression());
            if (accept_op("]")) break;
            expect_op(",");
          }
          return list;
        }
        if (accept_op("{")) {
          auto dict = make(Expr::Kind::kDict);
          while (!accept_op("}")) {
            dict->items.push_back(parse_expression());
            expect_op(":");
            dict->items.push_back(parse_expression());
            if (accept_op("}")) break;
            expect_op(",");
          }
          return dict;
        }
        break;
      }
      case Token::Kind::kEnd:
        break;
    }
    MG_FAIL("line {}: expected an expression, got '{}'", line_, describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (accept_op(".")) {
        auto get = make(Expr::Kind::kGetAttr);
        get->a = std::move(e);
        if (peek().kind == Token::Kind::kInt) {
          get->kind = Expr::Kind::kGetItem;
          get->b = make(Expr::Kind::kLiteral);
          get->b->literal = Value::integer(tokens_[pos_++].int_value);
        } else {
          get->name = expect_name();
        }
        e = std::move(get);
      } else if (accept_op("[")) {
        ExprPtr parts[3];
        bool slice = false;
        if (!is_op(":")) parts[0] = parse_expression();
        for (int i = 1; i < 3 && accept_op(":"); ++i) {
          slice = true;
          if (!is_op(":") && !is_op("]")) parts[i] = parse_expression();
        }
        expect_op("]");
        if (slice) {
          auto s = make(Expr::Kind::kSlice);
          s->a = std::move(e);
          for (auto& p : parts) s->items.push_back(std::move(p));
          e = std::move(s);
        } else {
          MG_CHECK(parts[0] != nullptr, "line {}: empty subscript", line_);
          auto get = make(Expr::Kind::kGetItem);
          get->a = std::move(e);
          get->b = std::move(parts[0]);
          e = std::move(get);
        }
      } else if (accept_op("(")) {
        if (e->kind == Expr::Kind::kGetAttr) {
          MG_CHECK(is_known_method(e->name), "line {}: the method '{}' is not supported", line_,
                   e->name);
        }
        auto call = make(Expr::Kind::kCall);
        call->a = std::move(e);
        parse_call_args(*call);
        e = std::move(call);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filters_and_tests(ExprPtr e) {
    for (;;) {
      if (accept_op("|")) {
        auto f = make(Expr::Kind::kFilter);
        f->name = expect_name();
        MG_CHECK(is_known_filter(f->name), "line {}: the filter '{}' is not supported", line_,
                 f->name);
        f->a = std::move(e);
        if (accept_op("(")) parse_call_args(*f);
        e = parse_postfix(std::move(f));
      } else if (accept_name("is")) {
        auto t = make(Expr::Kind::kTest);
        t->negated = accept_name("not");
        // `none`, `true` and `false` are names here.
        t->name = expect_name();
        MG_CHECK(is_known_test(t->name), "line {}: the test '{}' is not supported", line_, t->name);
        t->a = std::move(e);
        if (accept_op("(")) {
          parse_call_args(*t);
        } else if (!at_end() &&
                   (peek().kind != Token::Kind::kName ||
                    (!is_name("and") && !is_name("or") && !is_name("if") && !is_name("else") &&
                     !is_name("in") && !is_name("not") && !is_name("is"))) &&
                   peek().kind != Token::Kind::kOp) {
          // `x is divisibleby 3`, `x is sameas none`: one argument without parentheses.
          t->items.push_back(parse_primary());
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int line_;
  int depth_ = 0;     // parse_* calls in progress
  size_t nodes_ = 0;  // nodes made for this tag
};

// ---- Stage 4: statements
// ---------------------------------------------------------------------------

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Segment> segments) : segments_(std::move(segments)) {}

  Body parse_all() {
    std::string stop;
    Body body = parse_body({}, &stop);
    return body;
  }

 private:
  // Parses nodes until a statement whose keyword is in `stops` (returned in *stop, its parser in
  // *stop_parser) or the end of the template (stop empty).
  Body parse_body(const std::vector<std::string_view>& stops, std::string* stop,
                  std::unique_ptr<ExprParser>* stop_parser = nullptr) {
    Body body;
    while (pos_ < segments_.size()) {
      const Segment& seg = segments_[pos_++];
      switch (seg.kind) {
        case Segment::Kind::kText: {
          auto n = node(Node::Kind::kText, seg.line);
          n->text = seg.text;
          body.push_back(std::move(n));
          break;
        }
        case Segment::Kind::kOutput: {
          ExprParser p(tokenize(seg.text, seg.line), seg.line);
          auto n = node(Node::Kind::kOutput, seg.line);
          n->expr = p.parse_tuple_or_expression();
          p.expect_end("the expression");
          body.push_back(std::move(n));
          break;
        }
        case Segment::Kind::kStatement: {
          auto p = std::make_unique<ExprParser>(tokenize(seg.text, seg.line), seg.line);
          const std::string keyword = p->expect_name();
          for (std::string_view s : stops) {
            if (keyword == s) {
              *stop = keyword;
              if (stop_parser != nullptr) *stop_parser = std::move(p);
              return body;
            }
          }
          body.push_back(parse_statement(keyword, *p, seg.line));
          break;
        }
      }
    }
    MG_CHECK(stops.empty(), "the template ends inside a block (expected '{}')", stops[0]);
    stop->clear();
    return body;
  }

  NodePtr node(Node::Kind kind, int line) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = line;
    return n;
  }

  NodePtr parse_statement(const std::string& keyword, ExprParser& p, int line) {
    // Blocks nest by recursion (parse_body), as does running them.
    const DepthGuard guard(depth_, kMaxParseDepth, fmt::format("line {}: blocks", line));
    std::string stop;
    if (keyword == "if") {
      auto n = node(Node::Kind::kIf, line);
      ExprPtr cond = p.parse_expression();
      p.expect_end("the if condition");
      for (;;) {
        std::unique_ptr<ExprParser> next;
        Body body = parse_body({"elif", "else", "endif"}, &stop, &next);
        n->branches.emplace_back(std::move(cond), std::move(body));
        if (stop == "endif") break;
        if (stop == "else") {
          next->expect_end("else");
          Body else_body = parse_body({"endif"}, &stop);
          n->branches.emplace_back(nullptr, std::move(else_body));
          break;
        }
        cond = next->parse_expression();
        next->expect_end("the elif condition");
      }
      return n;
    }
    if (keyword == "for") {
      auto n = node(Node::Kind::kFor, line);
      n->targets = p.parse_targets();
      MG_CHECK(p.accept_name("in"), "line {}: expected 'in' in the for statement", line);
      n->expr = p.parse_expression(/*with_conditional=*/false);
      if (p.accept_name("if")) n->condition = p.parse_expression(false);
      MG_CHECK(!p.is_name("recursive"), "line {}: recursive for loops are not supported", line);
      p.expect_end("the for statement");
      n->body = parse_body({"else", "endfor"}, &stop);
      if (stop == "else") n->else_body = parse_body({"endfor"}, &stop);
      return n;
    }
    if (keyword == "set") {
      std::string first = p.expect_name();
      if (p.accept_op(".")) {
        auto n = node(Node::Kind::kSet, line);
        n->targets = {first};
        n->attr = p.expect_name();
        p.expect_op("=");
        n->expr = p.parse_tuple_or_expression();
        p.expect_end("the set statement");
        return n;
      }
      std::vector<std::string> targets{first};
      while (p.accept_op(",")) targets.push_back(p.expect_name());
      if (p.at_end()) {
        MG_CHECK(targets.size() == 1, "line {}: a set block assigns one name", line);
        auto n = node(Node::Kind::kSetBlock, line);
        n->targets = targets;
        n->body = parse_body({"endset"}, &stop);
        return n;
      }
      auto n = node(Node::Kind::kSet, line);
      n->targets = targets;
      p.expect_op("=");
      n->expr = p.parse_tuple_or_expression();
      p.expect_end("the set statement");
      return n;
    }
    if (keyword == "macro") {
      auto n = node(Node::Kind::kMacro, line);
      n->name = p.expect_name();
      p.expect_op("(");
      while (!p.accept_op(")")) {
        std::string param = p.expect_name();
        ExprPtr def;
        if (p.accept_op("=")) def = p.parse_expression();
        n->params.emplace_back(std::move(param), std::move(def));
        if (p.accept_op(")")) break;
        p.expect_op(",");
      }
      p.expect_end("the macro signature");
      n->body = parse_body({"endmacro"}, &stop);
      return n;
    }
    if (keyword == "break" || keyword == "continue") {
      p.expect_end(keyword);
      return node(keyword == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, line);
    }
    if (keyword == "generation") {
      p.expect_end(keyword);
      auto n = node(Node::Kind::kBlock, line);
      n->body = parse_body({"endgeneration"}, &stop);
      return n;
    }
    MG_FAIL(
        "line {}: the statement '{{% {} %}}' is not supported (supported: if, for, set, macro, "
        "break, continue, generation)",
        line, keyword);
  }

  std::vector<Segment> segments_;
  size_t pos_ = 0;
  int depth_ = 0;  // parse_statement calls in progress
};

}  // namespace

Body parse_template(std::string_view source) {
  return TemplateParser(split_segments(source)).parse_all();
}

}  // namespace mg::text::jinja
