// Helpers shared by the PML test files.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "core/status.h"
#include "pml/pml.h"
#include "pml/pml_fake_encoder.h"

#define PML_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  PML_ASSERT_OK_AND_ASSIGN_IMPL(PC_CONCAT(pml_result_, __LINE__), lhs, expr)
#define PML_ASSERT_OK_AND_ASSIGN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  ASSERT_TRUE(tmp.ok()) << tmp.status().message();    \
  lhs = std::move(tmp).value()

namespace promptcache {

// The default fake encoder: one token per word.
inline const FakePmlEncoder kWords;

inline std::string PmlTestData() { return std::string(PC_SOURCE_DIR) + "/src/pml/testdata"; }

inline ::testing::AssertionResult HasText(const std::string& haystack, std::string_view needle) {
  if (haystack.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "'" << haystack << "' does not contain '" << needle << "'";
}

// The message of a failed ParseSchema (or "OK" when it succeeds).
inline std::string SchemaError(std::string_view xml, const PmlTextEncoder& enc,
                               const std::string& path = "s.xml") {
  auto r = ParseSchema(xml, path, enc);
  return r.ok() ? "OK" : r.status().message();
}

}  // namespace promptcache
