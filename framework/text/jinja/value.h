// The values a chat template computes with, as Python's objects behave under jinja2: none, bool,
// int, float, str, list, dict (insertion-ordered), jinja2's Undefined, and callables (macros, the
// builtins, namespace()). Lists and dicts are shared (reference semantics, as in Python), so a
// namespace() object set in a loop is seen after it.
//
// Text conversion follows Python: str() for output ({{ x }}: None -> "None", True -> "True",
// 1.0 -> "1.0", a list -> "['a', 1]"), json.dumps(ensure_ascii=False) for |tojson (what
// transformers installs as the filter).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mg::text::jinja {

class Value;
using ValueList = std::vector<Value>;

// An insertion-ordered dict with string keys (Python dicts keep insertion order; templates print
// tools' JSON schemas key by key).
class ValueDict {
 public:
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value value);
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  size_t size() const;  // defined below Value: clang needs Value complete for the pair's size

 private:
  std::vector<std::pair<std::string, Value>> items_;
};

// Arguments of a call: positional values, then name=value pairs.
struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Callable = std::function<Value(const CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // undefined
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value real(double d);
  static Value string(std::string s);
  static Value list(ValueList items = {});
  static Value dict(ValueDict items = {});
  static Value callable(Callable fn);
  // JSON (a request's messages, tools, template kwargs) as Python's json.loads makes it: numbers
  // with a fraction or exponent are floats, others ints.
  static Value from_json(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_number() const { return kind_ == Kind::kFloat ? d_ : static_cast<double>(i_); }
  const std::string& as_string() const { return *s_; }
  const ValueList& as_list() const { return *list_; }
  ValueList& as_list() { return *list_; }
  const ValueDict& as_dict() const { return *dict_; }
  ValueDict& as_dict() { return *dict_; }
  const Callable& as_callable() const { return *fn_; }

  // Python's bool(x); undefined is false.
  bool truthy() const;
  // Python's type name, for error messages ("str", "list", "dict", "undefined", ...).
  const char* type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<const Callable> fn_;
};

inline size_t ValueDict::size() const {
  return items_.size();
}

// Python's ==, as jinja2 compares (1 == 1.0, lists and dicts element by element).
bool values_equal(const Value& a, const Value& b);

// str(x) as jinja2 prints it; undefined prints as "".
std::string to_str(const Value& v);
// repr(x): strings quoted as Python quotes them.
std::string to_repr(const Value& v);
// json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys); indent < 0: none
// (separators ", " and ": "), else newlines and `indent` spaces (separators "," and ": ").
// Throws mg::Error for what JSON cannot hold (undefined, callables).
std::string to_json(const Value& v, int indent = -1, bool sort_keys = false);
// Python's repr of a float ("1.0", "0.1", "1e-05", "1e+16", "inf", "nan").
std::string python_float_repr(double d);

}  // namespace mg::text::jinja
