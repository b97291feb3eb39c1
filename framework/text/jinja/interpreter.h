// Renders a parsed chat template (ast.h) with jinja2's scoping: a for loop's iterations and a
// macro's body assign into their own scope (so templates use namespace() to carry values out),
// an if does not; macros see the template's top-level names.
#pragma once

#include <string>

#include "framework/text/jinja/ast.h"
#include "framework/text/jinja/limits.h"
#include "framework/text/jinja/value.h"

namespace mg::text::jinja {

// `globals`: the render's variables (messages, tools, add_generation_prompt, bos_token, ...) and
// functions (raise_exception, strftime_now). range(), namespace() and dict() are built in.
// Throws mg::Error "line N: ..." for an error during the render (raise_exception's message
// included), and for a render past one of limits.h's bounds (`work_limit` replaces the work
// bound, for tests).
std::string render(const Body& body, const ValueDict& globals, int64_t work_limit = kMaxRenderWork);

}  // namespace mg::text::jinja
