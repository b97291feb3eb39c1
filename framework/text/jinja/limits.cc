#include "framework/text/jinja/limits.h"

#include "framework/core/error.h"

namespace mg::text::jinja {

namespace {
// The budget of the render on this thread (renders on other threads, e.g. the server's request
// threads, have their own).
thread_local WorkBudget* current_budget = nullptr;
}  // namespace

WorkBudget::WorkBudget(int64_t limit) : limit_(limit), previous_(current_budget) {
  current_budget = this;
}

WorkBudget::~WorkBudget() {
  current_budget = previous_;
}

void charge_work(int64_t units) {
  WorkBudget* b = current_budget;
  if (b == nullptr) return;
  b->used_ += units;
  MG_CHECK(b->used_ <= b->limit_,
           "the template did more than {} steps of work (a loop or value that grows without "
           "bound?)",
           b->limit_);
}

void check_string_size(size_t bytes, std::string_view what) {
  MG_CHECK(bytes <= kMaxStringBytes, "{} would make a string of {} bytes (at most {})", what, bytes,
           kMaxStringBytes);
}

void check_list_size(size_t items, std::string_view what) {
  MG_CHECK(items <= kMaxListItems, "{} would make a list of {} items (at most {})", what, items,
           kMaxListItems);
}

DepthGuard::DepthGuard(int& depth, int limit, std::string_view what) : depth_(depth) {
  MG_CHECK(depth_ < limit, "{} nested more than {} deep", what, limit);
  ++depth_;
}

}  // namespace mg::text::jinja
