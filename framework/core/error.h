// Errors: user input problems vs internal bugs.
//
// MG_CHECK is for anything a user can cause (a bad graph file, a missing tensor, a wrong flag):
// it throws mg::Error with a message that names the thing and says what was expected.
// MG_ASSERT is for invariants of our own code: it throws mg::InternalError. The command line maps
// Error to exit code 2 and InternalError (or anything else) to exit code 1.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace mg {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error(what) {}
};

namespace detail {
[[noreturn]] void throw_internal(const char* file, int line, const char* cond,
                                 const std::string& msg);
}  // namespace detail

}  // namespace mg

// Throws mg::Error(fmt::format(...)) when `cond` is false.
#define MG_CHECK(cond, ...)                          \
  do {                                               \
    if (!(cond)) [[unlikely]] {                      \
      throw ::mg::Error(::fmt::format(__VA_ARGS__)); \
    }                                                \
  } while (false)

// Throws mg::Error unconditionally.
#define MG_FAIL(...) throw ::mg::Error(::fmt::format(__VA_ARGS__))

// Throws mg::InternalError naming the file and line when `cond` is false.
#define MG_ASSERT(cond, ...)                                                               \
  do {                                                                                     \
    if (!(cond)) [[unlikely]] {                                                            \
      ::mg::detail::throw_internal(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
    }                                                                                      \
  } while (false)
