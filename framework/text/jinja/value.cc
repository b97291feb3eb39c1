#include "framework/text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <type_traits>

#include <fmt/format.h>

#include "framework/core/error.h"
#include "framework/text/jinja/limits.h"

namespace mg::text::jinja {

namespace {

// The recursions over values below (from_json, ==, repr, tojson) each hold a depth: a value can
// contain itself (`{% set ns.self = ns %}`), and JSON can nest deeply.
void check_value_depth(int depth, std::string_view what) {
  MG_CHECK(depth < kMaxValueDepth,
           "{}: a value nested more than {} deep (a list or dict that contains itself?)", what,
           kMaxValueDepth);
}

// Appends to a string a render builds, within kMaxStringBytes.
void append_bounded(std::string& out, std::string_view s, std::string_view what) {
  check_string_size(out.size() + s.size(), what);
  out += s;
}

// Lists and dicts are freed without recursion: a template can nest them thousands deep (a loop of
// `{% set ns.x = namespace(prev=ns.x) %}`), and freeing the outermost would otherwise recurse
// once per level and overflow the stack. The first container freed on a thread frees the rest in
// a loop; containers whose count drops to zero meanwhile are queued, not freed inside it.
struct ReleaseQueue {
  std::vector<ValueList*> lists;
  std::vector<ValueDict*> dicts;
  bool draining = false;
};
thread_local ReleaseQueue release_queue;  // one for lists and dicts: they nest in each other

template <typename Container>
void release_container(Container* c) {
  ReleaseQueue& q = release_queue;
  if constexpr (std::is_same_v<Container, ValueList>) {
    q.lists.push_back(c);
  } else {
    q.dicts.push_back(c);
  }
  if (q.draining) return;
  q.draining = true;
  while (!q.lists.empty() || !q.dicts.empty()) {
    if (!q.lists.empty()) {
      ValueList* l = q.lists.back();
      q.lists.pop_back();
      delete l;
    } else {
      ValueDict* d = q.dicts.back();
      q.dicts.pop_back();
      delete d;
    }
  }
  q.draining = false;
}

}  // namespace

const Value* ValueDict::find(std::string_view key) const {
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* ValueDict::find(std::string_view key) {
  for (auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ValueDict::set(const std::string& key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
  } else {
    items_.emplace_back(key, std::move(value));
  }
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::real(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.d_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ =
      std::shared_ptr<ValueList>(new ValueList(std::move(items)), &release_container<ValueList>);
  return v;
}

Value Value::dict(ValueDict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ =
      std::shared_ptr<ValueDict>(new ValueDict(std::move(items)), &release_container<ValueDict>);
  return v;
}

Value Value::callable(Callable fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<const Callable>(std::move(fn));
  return v;
}

namespace {
Value from_json_at(const nlohmann::ordered_json& json, int depth);
}  // namespace

Value Value::from_json(const nlohmann::ordered_json& json) {
  return from_json_at(json, 0);
}

namespace {
Value from_json_at(const nlohmann::ordered_json& json, int depth) {
  using J = nlohmann::ordered_json::value_t;
  using V = Value;
  check_value_depth(depth, "JSON");
  switch (json.type()) {
    case J::null:
    case J::discarded:
      return V::none();
    case J::boolean:
      return V::boolean(json.get<bool>());
    case J::number_integer:
      return V::integer(json.get<int64_t>());
    case J::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      MG_CHECK(u <= static_cast<uint64_t>(INT64_MAX), "integer {} is too large", u);
      return V::integer(static_cast<int64_t>(u));
    }
    case J::number_float:
      return V::real(json.get<double>());
    case J::string:
      return V::string(json.get<std::string>());
    case J::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& e : json) items.push_back(from_json_at(e, depth + 1));
      return V::list(std::move(items));
    }
    case J::object: {
      ValueDict items;
      for (const auto& [k, e] : json.items()) items.set(k, from_json_at(e, depth + 1));
      return V::dict(std::move(items));
    }
    case J::binary:
      MG_FAIL("binary JSON values have no template value");
  }
  MG_FAIL("unknown JSON value type");
}
}  // namespace

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return d_ != 0.0;
    case Kind::kString:
      return !s_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return dict_->size() != 0;
    case Kind::kCallable:
      return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

namespace {
bool values_equal_at(const Value& a, const Value& b, int depth) {
  using K = Value::Kind;
  check_value_depth(depth, "==");
  charge_work(1);
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::kInt && b.kind() == K::kInt) return a.as_int() == b.as_int();
    return a.as_number() == b.as_number();
  }
  // Python: True == 1.
  if (a.kind() == K::kBool && b.is_number()) {
    return values_equal_at(Value::integer(a.as_bool()), b, depth);
  }
  if (b.kind() == K::kBool && a.is_number()) {
    return values_equal_at(a, Value::integer(b.as_bool()), depth);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone:
      return true;
    case K::kBool:
      return a.as_bool() == b.as_bool();
    case K::kInt:
    case K::kFloat:
      return false;  // handled above
    case K::kString:
      return a.as_string() == b.as_string();
    case K::kList: {
      const ValueList& x = a.as_list();
      const ValueList& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!values_equal_at(x[i], y[i], depth + 1)) return false;
      }
      return true;
    }
    case K::kDict: {
      const ValueDict& x = a.as_dict();
      const ValueDict& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* other = y.find(k);
        if (other == nullptr || !values_equal_at(v, *other, depth + 1)) return false;
      }
      return true;
    }
    case K::kCallable:
      return false;
  }
  return false;
}
}  // namespace

bool values_equal(const Value& a, const Value& b) {
  return values_equal_at(a, b, 0);
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form "d.ddde[+-]XX", then Python's layout: plain
  // decimal for exponents -4..15, scientific otherwise.
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, end);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::atoi(sci.c_str() + e + 1);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out;
}

namespace {

std::string python_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == quote) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += quote;
  return out;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void json_dump(std::string& out, const Value& v, int indent, bool sort_keys, int depth) {
  using K = Value::Kind;
  check_value_depth(depth, "tojson");
  charge_work(1);
  // Each element starts within the bound; a string's escapes can take it at most 6x past it.
  check_string_size(out.size(), "tojson");
  const auto newline = [&](int level) {
    if (indent < 0) return;
    const uint64_t spaces = static_cast<uint64_t>(indent) * static_cast<uint64_t>(level);
    check_string_size(out.size() + 1 + (spaces > kMaxStringBytes ? kMaxStringBytes : spaces),
                      "tojson");
    out += '\n';
    out.append(static_cast<size_t>(spaces), ' ');
  };
  switch (v.kind()) {
    case K::kUndefined:
      MG_FAIL("tojson: an undefined value is not JSON serializable");
    case K::kCallable:
      MG_FAIL("tojson: a function is not JSON serializable");
    case K::kNone:
      out += "null";
      return;
    case K::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case K::kInt:
      out += std::to_string(v.as_int());
      return;
    case K::kFloat: {
      const double d = v.as_number();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        out += python_float_repr(d);
      }
      return;
    }
    case K::kString:
      check_string_size(out.size() + v.as_string().size(), "tojson");
      json_string(out, v.as_string());
      return;
    case K::kList: {
      const ValueList& items = v.as_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        json_dump(out, items[i], indent, sort_keys, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case K::kDict: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.as_dict().items()) items.push_back(&item);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        json_string(out, items[i]->first);
        out += ": ";
        json_dump(out, items[i]->second, indent, sort_keys, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
  }
}

}  // namespace

namespace {
void repr_into(std::string& out, const Value& v, int depth) {
  using K = Value::Kind;
  check_value_depth(depth, "str");
  charge_work(1);
  switch (v.kind()) {
    case K::kString:
      check_string_size(out.size() + v.as_string().size(), "str");
      append_bounded(out, python_string_repr(v.as_string()), "str");
      return;
    case K::kList: {
      append_bounded(out, "[", "str");
      const ValueList& items = v.as_list();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) append_bounded(out, ", ", "str");
        repr_into(out, items[i], depth + 1);
      }
      append_bounded(out, "]", "str");
      return;
    }
    case K::kDict: {
      append_bounded(out, "{", "str");
      bool first = true;
      for (const auto& [k, e] : v.as_dict().items()) {
        if (!first) append_bounded(out, ", ", "str");
        first = false;
        check_string_size(out.size() + k.size(), "str");
        append_bounded(out, python_string_repr(k) + ": ", "str");
        repr_into(out, e, depth + 1);
      }
      append_bounded(out, "}", "str");
      return;
    }
    case K::kUndefined:
    case K::kNone:
    case K::kBool:
    case K::kInt:
    case K::kFloat:
    case K::kCallable:
      append_bounded(out, v.is_undefined() ? "Undefined" : to_str(v), "str");
      return;
  }
}
}  // namespace

std::string to_repr(const Value& v) {
  std::string out;
  repr_into(out, v, 0);
  return out;
}

std::string to_str(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::kUndefined:
      return "";
    case K::kNone:
      return "None";
    case K::kBool:
      return v.as_bool() ? "True" : "False";
    case K::kInt:
      return std::to_string(v.as_int());
    case K::kFloat:
      return python_float_repr(v.as_number());
    case K::kString:
      return v.as_string();
    case K::kList:
    case K::kDict:
      return to_repr(v);
    case K::kCallable:
      return "<function>";
  }
  return "";
}

std::string to_json(const Value& v, int indent, bool sort_keys) {
  std::string out;
  json_dump(out, v, indent, sort_keys, 0);
  return out;
}

}  // namespace mg::text::jinja
