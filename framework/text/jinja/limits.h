// Bounds on parsing and rendering a chat template. The template comes from a checkpoint's files
// and what it renders (messages, tools, template kwargs) from HTTP requests: both are untrusted.
// So every size a render can grow and every amount of work it can do is bounded, and going past a
// bound is an mg::Error naming it, never a crash (stack overflow), a hang or an allocation the
// machine cannot make. Real templates stay orders of magnitude below each bound
// (docs/chat_templates.md, "Bounds", says how far).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mg::text::jinja {

// Sizes.
inline constexpr size_t kMaxRenderBytes = 64u << 20;  // the rendered prompt
inline constexpr size_t kMaxStringBytes = 16u << 20;  // any one string a render builds
inline constexpr size_t kMaxListItems = 1u << 20;     // any one list a render builds

// Nesting, which is recursion in the parser and the interpreter (bounded so the stack is).
inline constexpr int kMaxParseDepth = 100;     // expressions and blocks nested in the source
inline constexpr size_t kMaxExprNodes = 2000;  // nodes of one tag's expression (a+b+c+... chains)
inline constexpr int kMaxEvalDepth = 400;      // expressions and blocks being run, macros' included
inline constexpr int kMaxCallDepth = 64;       // nested macro calls
inline constexpr int kMaxValueDepth = 256;  // lists/dicts in lists/dicts that str, ==, tojson walk

// Work: one unit per evaluated expression or executed statement and per element a comparison,
// str() or tojson visits; for each value an expression computes (not one it looks up), a unit per
// kWorkBytesPerUnit bytes of a string and kWorkUnitsPerItem per item of a list or dict; the same
// for the strings a builtin scans and the lists it copies. So the budget bounds the time of a
// render and the memory it can allocate in all (25M units: ~400 MB of strings or ~550 MB of
// list items). Rendering a 1,000-turn conversation through a family's template takes well under
// 1% of it (docs/chat_templates.md, "Bounds").
inline constexpr int64_t kWorkBytesPerUnit = 16;
inline constexpr int64_t kWorkUnitsPerItem = 4;
inline constexpr int64_t kMaxRenderWork = 25'000'000;

// The work budget of the render running on this thread. render() installs one; charge_work()
// adds to it and throws mg::Error past its limit. Outside a render (a unit test calling a builtin
// directly) charging does nothing.
class WorkBudget {
 public:
  explicit WorkBudget(int64_t limit = kMaxRenderWork);
  ~WorkBudget();
  WorkBudget(const WorkBudget&) = delete;
  WorkBudget& operator=(const WorkBudget&) = delete;

 private:
  friend void charge_work(int64_t units);
  int64_t limit_;
  int64_t used_ = 0;
  WorkBudget* previous_;
};

void charge_work(int64_t units);
// The work of scanning `bytes` of a string / copying `items` of a list.
inline void charge_bytes(size_t bytes) {
  charge_work(static_cast<int64_t>(bytes) / kWorkBytesPerUnit);
}
inline void charge_items(size_t items) {
  charge_work(static_cast<int64_t>(items) * kWorkUnitsPerItem);
}

// mg::Error unless a string of `bytes` / a list of `items` may be built; `what` names the
// operation ("'~'", "replace", ...).
void check_string_size(size_t bytes, std::string_view what);
void check_list_size(size_t items, std::string_view what);

// Holds a recursion's depth for its scope: mg::Error naming `what` past `limit`.
class DepthGuard {
 public:
  DepthGuard(int& depth, int limit, std::string_view what);
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int& depth_;
};

}  // namespace mg::text::jinja
