#include "framework/text/jinja/builtins.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "framework/core/error.h"
#include "framework/text/jinja/ast.h"
#include "framework/text/jinja/limits.h"
#include "framework/text/utf8.h"

namespace mg::text::jinja {

namespace {

constexpr std::string_view kFilters[] = {
    "abs",     "capitalize", "count", "d",      "default", "dictsort",   "first",
    "float",   "indent",     "int",   "items",  "join",    "last",       "length",
    "list",    "lower",      "map",   "max",    "min",     "reject",     "rejectattr",
    "replace", "reverse",    "round", "safe",   "select",  "selectattr", "sort",
    "string",  "sum",        "title", "tojson", "trim",    "unique",     "upper"};
constexpr std::string_view kTests[] = {
    "boolean", "callable", "defined",  "divisibleby", "eq",   "equalto",   "even",
    "false",   "float",    "ge",       "gt",          "in",   "integer",   "iterable",
    "le",      "lower",    "lt",       "mapping",     "ne",   "none",      "number",
    "odd",     "sameas",   "sequence", "string",      "true", "undefined", "upper"};
constexpr std::string_view kMethods[] = {"startswith", "endswith",   "split",   "rsplit", "strip",
                                         "lstrip",     "rstrip",     "upper",   "lower",  "replace",
                                         "title",      "capitalize", "find",    "rfind",  "count",
                                         "join",       "items",      "keys",    "values", "get",
                                         "splitlines", "isdigit",    "isspace", "isalpha"};

bool contains(std::span<const std::string_view> names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Argument `index` or keyword `name`; undefined when neither is given.
Value arg(const CallArgs& args, size_t index, std::string_view name) {
  for (const auto& [k, v] : args.keyword) {
    if (k == name) return v;
  }
  if (index < args.positional.size()) return args.positional[index];
  return Value();
}

const std::string& want_string(const Value& v, std::string_view what) {
  MG_CHECK(v.is_string(), "{}: expected a string, got {}", what, v.type_name());
  return v.as_string();
}

int64_t want_int(const Value& v, std::string_view what) {
  MG_CHECK(v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool,
           "{}: expected an integer, got {}", what, v.type_name());
  return v.kind() == Value::Kind::kBool ? v.as_bool() : v.as_int();
}

bool is_py_space(unsigned char c) {
  return c == ' ' || (c >= '\t' && c <= '\r');
}

std::string strip_chars(const std::string& s, const Value& chars, bool left, bool right) {
  // As Python's str.strip(5): a TypeError (this read a string out of a non-string: found by
  // fuzz_chat_template).
  MG_CHECK(chars.is_undefined() || chars.is_none() || chars.is_string(),
           "strip: the characters to strip must be a string, got {}", chars.type_name());
  auto strip_it = [&](unsigned char c) {
    if (chars.is_undefined() || chars.is_none()) return is_py_space(c);
    return chars.as_string().find(static_cast<char>(c)) != std::string::npos;
  };
  size_t b = 0;
  size_t e = s.size();
  if (left) {
    while (b < e && strip_it(s[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(s[e - 1])) --e;
  }
  return s.substr(b, e - b);
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t max_count) {
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    const uint64_t inserts = utf8_length(s) + 1;
    check_string_size(to.empty() || inserts <= kMaxStringBytes / to.size()
                          ? s.size() + inserts * to.size()
                          : kMaxStringBytes + 1,
                      "replace");
    std::string out = to;
    for (size_t i = 0; i < s.size(); i += utf8_char_length(s, i)) {
      out += s.substr(i, utf8_char_length(s, i)) + to;
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  int64_t n = 0;
  for (;;) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos || (max_count >= 0 && n >= max_count)) break;
    check_string_size(out.size() + (hit - pos) + to.size() + (s.size() - hit), "replace");
    out += s.substr(pos, hit - pos) + to;
    pos = hit + from.size();
    ++n;
  }
  return out + s.substr(pos);
}

ValueList split_string(const std::string& s, const Value& sep, int64_t max_split) {
  ValueList out;
  const auto push = [&out](std::string piece) {
    check_list_size(out.size() + 1, "split");
    out.push_back(Value::string(std::move(piece)));
  };
  if (sep.is_undefined() || sep.is_none()) {
    // Runs of whitespace separate; no empty pieces.
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_py_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(out.size()) >= max_split) {
        size_t e = s.size();
        while (e > i && is_py_space(s[e - 1])) --e;
        push(s.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !is_py_space(s[j])) ++j;
      push(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  const std::string& d = want_string(sep, "split");
  MG_CHECK(!d.empty(), "split: empty separator");
  size_t pos = 0;
  for (;;) {
    const size_t hit = s.find(d, pos);
    if (hit == std::string::npos ||
        (max_split >= 0 && static_cast<int64_t>(out.size()) >= max_split)) {
      break;
    }
    push(s.substr(pos, hit - pos));
    pos = hit + d.size();
  }
  push(s.substr(pos));
  return out;
}

std::string title_case(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(prev_cased ? std::tolower(u) : std::toupper(u));
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// attribute="a.b" of selectattr/map/sort: dotted lookup, digits index lists.
Value get_attribute_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (pos <= path.size()) {
    charge_work(1);
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? path.npos : dot - pos);
    int64_t index = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) && cur.is_list()) {
      // An index too large for int64 is past any list's end: undefined, as jinja2 gives.
      cur = ec == std::errc() && end == part.data() + part.size()
                ? get_item(cur, Value::integer(index))
                : Value();
    } else {
      cur = get_item(cur, Value::string(part));
    }
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return cur;
}

// Arguments after the first `skip` positional ones.
CallArgs rest_args(const CallArgs& args, size_t skip) {
  CallArgs out;
  for (size_t i = skip; i < args.positional.size(); ++i)
    out.positional.push_back(args.positional[i]);
  return out;
}

int compare_for_sort(const Value& a, const Value& b, bool case_sensitive) {
  charge_work(1);
  if (a.is_string() && b.is_string() && !case_sensitive) {
    charge_bytes(a.as_string().size() + b.as_string().size());
    const std::string x = lower(a.as_string());
    const std::string y = lower(b.as_string());
    return x < y ? -1 : (y < x ? 1 : 0);
  }
  if (value_less(a, b)) return -1;
  if (value_less(b, a)) return 1;
  return 0;
}

Value sum_values(const ValueList& items, Value start) {
  Value total = std::move(start);
  for (const Value& v : items) {
    MG_CHECK(v.is_number() && total.is_number(), "sum: expected numbers, got {}", v.type_name());
    if (v.kind() == Value::Kind::kInt && total.kind() == Value::Kind::kInt) {
      int64_t r = 0;
      MG_CHECK(!__builtin_add_overflow(total.as_int(), v.as_int(), &r), "sum: integer overflow");
      total = Value::integer(r);
    } else {
      total = Value::real(total.as_number() + v.as_number());
    }
  }
  return total;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return contains(kFilters, name);
}
bool is_known_test(std::string_view name) {
  return contains(kTests, name);
}
bool is_known_method(std::string_view name) {
  return contains(kMethods, name);
}

bool value_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::kInt && b.kind() == Value::Kind::kInt) {
      return a.as_int() < b.as_int();
    }
    return a.as_number() < b.as_number();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  MG_FAIL("'<' is not supported between {} and {}", a.type_name(), b.type_name());
}

bool value_contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Value::Kind::kString:
      MG_CHECK(needle.is_string(), "'in <string>' requires a string as the left operand, got {}",
               needle.type_name());
      charge_bytes(haystack.as_string().size());
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : haystack.as_list()) {
        if (values_equal(v, needle)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return needle.is_string() && haystack.as_dict().find(needle.as_string()) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kCallable:
      break;
  }
  MG_FAIL("argument of type '{}' is not iterable", haystack.type_name());
}

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList:
      charge_items(v.as_list().size());
      return v.as_list();
    case Value::Kind::kDict: {
      charge_items(v.as_dict().size());
      ValueList keys;
      for (const auto& [k, e] : v.as_dict().items()) keys.push_back(Value::string(k));
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      const std::string& s = v.as_string();
      const size_t n = utf8_length(s);
      check_list_size(n, "iterating a string's characters");
      charge_items(n);
      chars.reserve(n);
      for (size_t i = 0; i < s.size(); i += utf8_char_length(s, i)) {
        chars.push_back(Value::string(s.substr(i, utf8_char_length(s, i))));
      }
      return chars;
    }
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kCallable:
      break;
  }
  MG_FAIL("'{}' object is not iterable", v.type_name());
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::kDict: {
      if (!key.is_string()) return Value();
      const Value* v = obj.as_dict().find(key.as_string());
      return v != nullptr ? *v : Value();
    }
    case Value::Kind::kList: {
      if (key.kind() != Value::Kind::kInt) return Value();
      const int64_t n = static_cast<int64_t>(obj.as_list().size());
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      return obj.as_list()[static_cast<size_t>(i)];
    }
    case Value::Kind::kString: {
      if (key.kind() != Value::Kind::kInt) return Value();
      const std::string& s = obj.as_string();
      charge_bytes(s.size());
      const std::vector<size_t> starts = utf8_char_starts(s);
      const int64_t n = static_cast<int64_t>(starts.size());
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      const size_t at = starts[static_cast<size_t>(i)];
      return Value::string(s.substr(at, utf8_char_length(s, at)));
    }
    case Value::Kind::kUndefined:
      MG_FAIL("cannot read '{}' of an undefined value", to_str(key));
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kCallable:
      return Value();
  }
  return Value();
}

bool apply_test(std::string_view name, const Value& v, const CallArgs& args) {
  using K = Value::Kind;
  const Value a0 = arg(args, 0, "value");
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == K::kBool;
  if (name == "true") return v.kind() == K::kBool && v.as_bool();
  if (name == "false") return v.kind() == K::kBool && !v.as_bool();
  if (name == "integer") return v.kind() == K::kInt;
  if (name == "float") return v.kind() == K::kFloat;
  if (name == "number") return v.is_number() || v.kind() == K::kBool;
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  if (name == "callable") return v.is_callable();
  if (name == "lower") return v.is_string() && lower(v.as_string()) == v.as_string();
  if (name == "upper") return v.is_string() && upper(v.as_string()) == v.as_string();
  if (name == "odd") return want_int(v, "odd") % 2 != 0;
  if (name == "even") return want_int(v, "even") % 2 == 0;
  if (name == "divisibleby") {
    const int64_t d = want_int(a0, "divisibleby");
    MG_CHECK(d != 0, "divisibleby: division by zero");
    return want_int(v, "divisibleby") % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "sameas") return values_equal(v, a0);
  if (name == "ne") return !values_equal(v, a0);
  if (name == "lt") return value_less(v, a0);
  if (name == "gt") return value_less(a0, v);
  if (name == "le") return !value_less(a0, v);
  if (name == "ge") return !value_less(v, a0);
  if (name == "in") return value_contains(a0, v);
  MG_FAIL("the test '{}' is not supported", name);
}

Value apply_filter(std::string_view name, const Value& v, const CallArgs& args) {
  using K = Value::Kind;
  const Value a0 = arg(args, 0, "");
  if (v.is_string()) charge_bytes(v.as_string().size());  // every filter scans it at most once
  if (name == "safe" || name == "string") {
    return name == "safe" && !v.is_string() ? v : Value::string(to_str(v));
  }
  if (name == "tojson") {
    const Value indent = arg(args, 0, "indent");
    const Value sort_keys = arg(args, 100, "sort_keys");
    int json_indent = -1;
    if (!indent.is_undefined() && !indent.is_none()) {
      const int64_t i = want_int(indent, "tojson indent");
      MG_CHECK(i >= 0 && i <= 1024, "tojson: indent {} is outside 0..1024", i);
      json_indent = static_cast<int>(i);
    }
    return Value::string(to_json(v, json_indent, sort_keys.truthy()));
  }
  if (name == "length" || name == "count") {
    switch (v.kind()) {
      case K::kString:
        return Value::integer(static_cast<int64_t>(utf8_length(v.as_string())));
      case K::kList:
        return Value::integer(static_cast<int64_t>(v.as_list().size()));
      case K::kDict:
        return Value::integer(static_cast<int64_t>(v.as_dict().size()));
      case K::kUndefined:
        return Value::integer(0);
      case K::kNone:
      case K::kBool:
      case K::kInt:
      case K::kFloat:
      case K::kCallable:
        MG_FAIL("length: object of type '{}' has no len()", v.type_name());
    }
  }
  if (name == "default" || name == "d") {
    const bool boolean = arg(args, 1, "boolean").truthy();
    const bool use_default = v.is_undefined() || (boolean && !v.truthy());
    return use_default ? (a0.is_undefined() ? Value::string("") : a0) : v;
  }
  if (name == "trim") {
    return Value::string(strip_chars(want_string(v, "trim"), arg(args, 0, "chars"), true, true));
  }
  if (name == "upper") return Value::string(upper(want_string(v, "upper")));
  if (name == "lower") return Value::string(lower(want_string(v, "lower")));
  if (name == "title") return Value::string(title_case(want_string(v, "title")));
  if (name == "capitalize") {
    std::string s = lower(want_string(v, "capitalize"));
    if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    return Value::string(s);
  }
  if (name == "replace") {
    const Value count = arg(args, 2, "count");
    return Value::string(replace_all(want_string(v, "replace"), want_string(a0, "replace"),
                                     want_string(arg(args, 1, "new"), "replace"),
                                     count.is_undefined() ? -1 : want_int(count, "replace")));
  }
  if (name == "join") {
    const Value attribute = arg(args, 1, "attribute");
    std::string out;
    bool first = true;
    const std::string separator = a0.is_undefined() ? "" : to_str(a0);
    for (const Value& e : iterate(v)) {
      const std::string part =
          to_str(attribute.is_undefined() ? e : get_attribute_path(e, to_str(attribute)));
      check_string_size(out.size() + (first ? 0 : separator.size()) + part.size(), "join");
      if (!first) out += separator;
      first = false;
      out += part;
    }
    return Value::string(out);
  }
  if ((name == "first" || name == "last") && v.is_list()) {
    if (v.as_list().empty()) return Value();
    return name == "first" ? v.as_list().front() : v.as_list().back();
  }
  if (name == "first" || name == "last") {
    const ValueList items = iterate(v);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::list(iterate(v));
  if (name == "reverse") {
    if (v.is_string()) {
      const std::string& s = v.as_string();
      const std::vector<size_t> starts = utf8_char_starts(s);
      std::string out;
      out.reserve(s.size());
      for (auto it = starts.rbegin(); it != starts.rend(); ++it) {
        out.append(s, *it, utf8_char_length(s, *it));
      }
      return Value::string(out);
    }
    ValueList items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list();
    MG_CHECK(v.is_dict(), "items: expected a mapping, got {}", v.type_name());
    ValueList out;
    for (const auto& [k, e] : v.as_dict().items()) {
      out.push_back(Value::list({Value::string(k), e}));
    }
    return Value::list(std::move(out));
  }
  if (name == "dictsort") {
    MG_CHECK(v.is_dict(), "dictsort: expected a mapping, got {}", v.type_name());
    const bool case_sensitive = arg(args, 0, "case_sensitive").truthy();
    const bool by_value =
        arg(args, 1, "by").is_string() && arg(args, 1, "by").as_string() == "value";
    const bool reverse = arg(args, 2, "reverse").truthy();
    ValueList out;
    for (const auto& [k, e] : v.as_dict().items()) {
      out.push_back(Value::list({Value::string(k), e}));
    }
    std::stable_sort(out.begin(), out.end(), [&](const Value& a, const Value& b) {
      const int c = compare_for_sort(a.as_list()[by_value ? 1 : 0], b.as_list()[by_value ? 1 : 0],
                                     case_sensitive);
      return reverse ? c > 0 : c < 0;
    });
    return Value::list(std::move(out));
  }
  if (name == "sort") {
    const bool reverse = arg(args, 0, "reverse").truthy();
    const bool case_sensitive = arg(args, 1, "case_sensitive").truthy();
    const Value attribute = arg(args, 2, "attribute");
    ValueList items = iterate(v);
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      const Value& x = attribute.is_undefined() ? a : get_attribute_path(a, to_str(attribute));
      const Value& y = attribute.is_undefined() ? b : get_attribute_path(b, to_str(attribute));
      const int c = compare_for_sort(x, y, case_sensitive);
      return reverse ? c > 0 : c < 0;
    });
    return Value::list(std::move(items));
  }
  if (name == "unique") {
    ValueList out;
    for (const Value& e : iterate(v)) {
      bool seen = false;
      for (const Value& o : out) {
        charge_work(1);  // n^2 comparisons
        if (e.is_string() && o.is_string()) {
          charge_bytes(e.as_string().size() + o.as_string().size());
        }
        if (e.is_string() && o.is_string() ? lower(e.as_string()) == lower(o.as_string())
                                           : values_equal(e, o)) {
          seen = true;
        }
      }
      if (!seen) out.push_back(e);
    }
    return Value::list(std::move(out));
  }
  if (name == "min" || name == "max") {
    const ValueList items = iterate(v);
    if (items.empty()) return Value();
    Value best = items[0];
    for (const Value& e : items) {
      const int c = compare_for_sort(e, best, false);
      if (name == "min" ? c < 0 : c > 0) best = e;
    }
    return best;
  }
  if (name == "sum") {
    const Value attribute = arg(args, 0, "attribute");
    ValueList items = iterate(v);
    if (!attribute.is_undefined()) {
      for (Value& e : items) e = get_attribute_path(e, to_str(attribute));
    }
    const Value start = arg(args, 1, "start");
    return sum_values(items, start.is_undefined() ? Value::integer(0) : start);
  }
  if (name == "selectattr" || name == "rejectattr") {
    const std::string attribute = want_string(a0, name);
    const Value test = arg(args, 1, "");
    ValueList out;
    for (const Value& e : iterate(v)) {
      const Value field = get_attribute_path(e, attribute);
      bool keep = test.is_undefined()
                      ? field.truthy()
                      : apply_test(want_string(test, name), field, rest_args(args, 2));
      if (name == "rejectattr") keep = !keep;
      if (keep) out.push_back(e);
    }
    return Value::list(std::move(out));
  }
  if (name == "select" || name == "reject") {
    ValueList out;
    for (const Value& e : iterate(v)) {
      bool keep =
          a0.is_undefined() ? e.truthy() : apply_test(want_string(a0, name), e, rest_args(args, 1));
      if (name == "reject") keep = !keep;
      if (keep) out.push_back(e);
    }
    return Value::list(std::move(out));
  }
  if (name == "map") {
    const Value attribute = arg(args, 100, "attribute");
    ValueList out;
    for (const Value& e : iterate(v)) {
      if (!attribute.is_undefined()) {
        Value field = get_attribute_path(e, to_str(attribute));
        const Value def = arg(args, 100, "default");
        out.push_back(field.is_undefined() && !def.is_undefined() ? def : field);
      } else {
        const std::string& filter = want_string(a0, "map");
        MG_CHECK(is_known_filter(filter), "map: the filter '{}' is not supported", filter);
        out.push_back(apply_filter(filter, e, rest_args(args, 1)));
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "abs") {
    MG_CHECK(v.is_number(), "abs: expected a number, got {}", v.type_name());
    if (v.kind() == K::kInt) {
      MG_CHECK(v.as_int() != INT64_MIN, "abs: integer overflow");
      return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
    }
    return Value::real(std::fabs(v.as_number()));
  }
  if (name == "int") {
    if (v.kind() == K::kInt) return v;
    if (v.kind() == K::kFloat) {
      // jinja2 gives the default where int() fails (nan, inf) and ours cannot hold the result.
      const double d = std::trunc(v.as_number());
      if (d >= -9.2233720368547758e18 && d < 9.2233720368547758e18) {
        return Value::integer(static_cast<int64_t>(d));
      }
      return a0.is_undefined() ? Value::integer(0) : a0;
    }
    if (v.kind() == K::kBool) return Value::integer(v.as_bool());
    if (v.is_string()) {
      try {
        size_t used = 0;
        const int64_t i = std::stoll(v.as_string(), &used);
        if (used == v.as_string().size()) return Value::integer(i);
      } catch (const std::exception&) {
      }
    }
    return a0.is_undefined() ? Value::integer(0) : a0;
  }
  if (name == "float") {
    if (v.is_number()) return Value::real(v.as_number());
    if (v.is_string()) {
      try {
        return Value::real(std::stod(v.as_string()));
      } catch (const std::exception&) {
      }
    }
    return a0.is_undefined() ? Value::real(0.0) : a0;
  }
  if (name == "round") {
    MG_CHECK(v.is_number(), "round: expected a number, got {}", v.type_name());
    const int64_t precision = a0.is_undefined() ? 0 : want_int(a0, "round");
    const double scale = std::pow(10.0, static_cast<double>(precision));
    return Value::real(std::nearbyint(v.as_number() * scale) / scale);
  }
  if (name == "indent") {
    const Value width = arg(args, 0, "width");
    // A negative width pads nothing (Python's ' ' * -1).
    const int64_t w = width.is_undefined() ? 4 : std::max<int64_t>(0, want_int(width, "indent"));
    check_string_size(static_cast<uint64_t>(w), "indent");
    const std::string pad(static_cast<size_t>(w), ' ');
    const bool first = arg(args, 1, "first").truthy();
    const bool blank = arg(args, 2, "blank").truthy();
    const std::string& s = want_string(v, "indent");
    std::string out;
    size_t pos = 0;
    bool first_line = true;
    while (pos <= s.size()) {
      const size_t nl = s.find('\n', pos);
      const std::string line = s.substr(pos, nl == std::string::npos ? s.npos : nl - pos);
      check_string_size(out.size() + pad.size() + line.size() + 1, "indent");
      if ((first_line ? first : true) && (blank || !line.empty())) out += pad;
      out += line;
      first_line = false;
      if (nl == std::string::npos) break;
      out += '\n';
      pos = nl + 1;
    }
    return Value::string(out);
  }
  MG_FAIL("the filter '{}' is not supported", name);
}

std::optional<Value> call_method(const Value& v, std::string_view name, const CallArgs& args) {
  const Value a0 = arg(args, 0, "");
  if (v.is_string()) {
    const std::string& s = v.as_string();
    charge_bytes(s.size());  // every method scans or copies at most the string
    if (name == "startswith" || name == "endswith") {
      ValueList prefixes = a0.is_list() ? a0.as_list() : ValueList{a0};
      for (const Value& p : prefixes) {
        const std::string& x = want_string(p, name);
        if (name == "startswith" ? s.starts_with(x) : s.ends_with(x)) return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "split" || name == "rsplit") {
      const Value max_split = arg(args, 1, "maxsplit");
      const int64_t m = max_split.is_undefined() ? -1 : want_int(max_split, name);
      if (name == "rsplit" && m >= 0) {
        // Split from the right: reverse, split on the reversed separator, reverse back.
        MG_CHECK(a0.is_string(), "rsplit with maxsplit needs a separator");
        std::string rs(s.rbegin(), s.rend());
        std::string rsep(a0.as_string().rbegin(), a0.as_string().rend());
        ValueList parts = split_string(rs, Value::string(rsep), m);
        std::reverse(parts.begin(), parts.end());
        for (Value& p : parts) {
          p = Value::string(std::string(p.as_string().rbegin(), p.as_string().rend()));
        }
        return Value::list(std::move(parts));
      }
      return Value::list(split_string(s, a0, m));
    }
    if (name == "strip") return Value::string(strip_chars(s, a0, true, true));
    if (name == "lstrip") return Value::string(strip_chars(s, a0, true, false));
    if (name == "rstrip") return Value::string(strip_chars(s, a0, false, true));
    if (name == "upper") return Value::string(upper(s));
    if (name == "lower") return Value::string(lower(s));
    if (name == "title") return Value::string(title_case(s));
    if (name == "capitalize") return apply_filter("capitalize", v, {});
    if (name == "replace") {
      const Value count = arg(args, 2, "count");
      return Value::string(replace_all(s, want_string(a0, name),
                                       want_string(arg(args, 1, ""), name),
                                       count.is_undefined() ? -1 : want_int(count, name)));
    }
    if (name == "find" || name == "rfind") {
      const size_t pos =
          name == "find" ? s.find(want_string(a0, name)) : s.rfind(want_string(a0, name));
      if (pos == std::string::npos) return Value::integer(-1);
      return Value::integer(static_cast<int64_t>(utf8_length(s.substr(0, pos))));
    }
    if (name == "count") {
      const std::string& x = want_string(a0, name);
      if (x.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
      int64_t n = 0;
      for (size_t pos = s.find(x); pos != std::string::npos; pos = s.find(x, pos + x.size())) ++n;
      return Value::integer(n);
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const Value& e : iterate(a0)) {
        const std::string& part = want_string(e, "join");
        check_string_size(out.size() + (first ? 0 : s.size()) + part.size(), "join");
        if (!first) out += s;
        first = false;
        out += part;
      }
      return Value::string(out);
    }
    if (name == "splitlines") {
      ValueList out;
      size_t pos = 0;
      while (pos < s.size()) {
        const size_t nl = s.find_first_of("\r\n", pos);
        check_list_size(out.size() + 1, "splitlines");
        if (nl == std::string::npos) {
          out.push_back(Value::string(s.substr(pos)));
          break;
        }
        out.push_back(Value::string(s.substr(pos, nl - pos)));
        pos = nl + (s.compare(nl, 2, "\r\n") == 0 ? 2 : 1);
      }
      return Value::list(std::move(out));
    }
    if (name == "isdigit" || name == "isspace" || name == "isalpha") {
      if (s.empty()) return Value::boolean(false);
      for (unsigned char c : s) {
        const bool ok = name == "isdigit"   ? std::isdigit(c) != 0
                        : name == "isspace" ? is_py_space(c)
                                            : std::isalpha(c) != 0;
        if (!ok) return Value::boolean(false);
      }
      return Value::boolean(true);
    }
    return std::nullopt;
  }
  if (v.is_dict()) {
    charge_items(v.as_dict().size());
    if (name == "items") return apply_filter("items", v, {});
    if (name == "keys") return Value::list(iterate(v));
    if (name == "values") {
      ValueList out;
      for (const auto& [k, e] : v.as_dict().items()) out.push_back(e);
      return Value::list(std::move(out));
    }
    if (name == "get") {
      const Value found = get_item(v, a0);
      if (!found.is_undefined()) return found;
      const Value def = arg(args, 1, "default");
      return def.is_undefined() ? Value::none() : def;
    }
    return std::nullopt;
  }
  if (v.is_list() && name == "count") {
    int64_t n = 0;
    for (const Value& e : v.as_list()) n += values_equal(e, a0);
    return Value::integer(n);
  }
  return std::nullopt;
}

}  // namespace mg::text::jinja
