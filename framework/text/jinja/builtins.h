// The filters (x | name), tests (x is name) and methods (x.name()) of the chat-template subset,
// each as jinja2 3.1 and Python define it for the value kinds templates meet (strings, lists,
// dicts, numbers). The parser refuses any other name (ast.h).
#pragma once

#include <optional>
#include <span>
#include <string_view>

#include "framework/text/jinja/value.h"

namespace mg::text::jinja {

// Throws mg::Error "filter NAME: ..." for arguments or a subject the filter does not take.
Value apply_filter(std::string_view name, const Value& subject, const CallArgs& args);
bool apply_test(std::string_view name, const Value& subject, const CallArgs& args);
// Methods of str, list and dict; nullopt when `subject` has no method `name`.
std::optional<Value> call_method(const Value& subject, std::string_view name, const CallArgs& args);

// Python's `a < b` for numbers and strings (mg::Error otherwise).
bool value_less(const Value& a, const Value& b);
// Python's `needle in haystack`.
bool value_contains(const Value& haystack, const Value& needle);
// The items a for loop or a filter iterates: a list's elements, a dict's keys, a string's
// characters; undefined iterates as empty. mg::Error for other kinds.
ValueList iterate(const Value& v);
// obj[key] / obj.key as jinja2 resolves it; undefined when absent.
Value get_item(const Value& obj, const Value& key);

}  // namespace mg::text::jinja
