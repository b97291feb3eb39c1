#include "framework/core/error.h"

namespace mg::detail {

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw InternalError(fmt::format("internal error at {}:{}: ({}) {}", file, line, cond, msg));
}

}  // namespace mg::detail
