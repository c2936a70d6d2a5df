// Helpers for tests of ops and of the modules above it that compare against reference data
// written by llama.cpp (ggml_reference_test.cc, model/conformance_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace promptcache {

// A file of raw float32 values (little-endian, as the x86 and ARM hosts store them); the test
// fails when it cannot be opened.
inline std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

}  // namespace promptcache
