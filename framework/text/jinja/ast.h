// The parsed form of a chat template: statements (text, output, if, for, set, macro, ...) holding
// expressions. parse_template() accepts the jinja2 subset documented in docs/chat_templates.md
// and refuses everything else with an mg::Error naming the line and the construct, so a template
// we cannot render exactly fails when the server starts rather than producing a wrong prompt.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "framework/text/jinja/value.h"

namespace mg::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,      // literal
    kName,         // name
    kList,         // [items...]
    kDict,         // {items[0]: items[1], ...}
    kGetAttr,      // a.name
    kGetItem,      // a[b]
    kSlice,        // a[items[0]:items[1]:items[2]] (null parts absent)
    kCall,         // a(items..., kwargs...)
    kFilter,       // a | name(items..., kwargs...)
    kTest,         // a is [not] name(items...)
    kUnary,        // name a  ("not", "-", "+")
    kBinary,       // a name b
    kConditional,  // a if b else c (c may be null)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Value literal;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;  // may hold nulls (slice parts)
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // kTest: `is not`
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches: (condition, body)...; the else branch has a null condition
    kFor,       // for targets in expr [if condition]: body [else: else_body]
    kSet,       // set targets = expr, or set targets[0].attr = expr
    kSetBlock,  // set targets[0] %} body {% endset
    kMacro,     // macro name(params): body
    kBreak,
    kContinue,
    kBlock,  // a body rendered in place (transformers' {% generation %})
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::string> targets;
  std::string attr;
  Body body;
  Body else_body;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
};

// Parses `source` as transformers' jinja2 environment does (trim_blocks, lstrip_blocks, one
// trailing newline dropped). Throws mg::Error "line N: ..." for a syntax error or a construct
// outside the subset (an unknown filter, test or method name, include/extends/import/call/raw).
Body parse_template(std::string_view source);

// The filters, tests and methods the evaluator implements (builtins.cc), so the parser can refuse
// others up front.
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);
bool is_known_method(std::string_view name);

}  // namespace mg::text::jinja
