// Helpers shared by the MoE test suites (unit and slow).
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "framework/core/error.h"

// Expects `stmt` to throw mg::Error whose message contains `substr`.
#define EXPECT_MG_ERROR(stmt, substr)                                          \
  do {                                                                         \
    try {                                                                      \
      stmt;                                                                    \
      ADD_FAILURE() << "expected mg::Error containing '" << (substr) << "'";   \
    } catch (const ::mg::Error& e) {                                           \
      EXPECT_NE(std::string(e.what()).find(substr), std::string::npos)         \
          << "message: " << e.what() << "\nexpected to contain: " << (substr); \
    }                                                                          \
  } while (false)
