// Test fixtures of the KV tests (kv_cache_test, block_cache_test, quantized_blocks_test,
// remote_tier_test): a small KV layout, token runs, sequences whose K/V elements carry their
// token id, so a test can tell which prompt's K/V a hit returned, and a scratch folder.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "core/check.h"
#include "kv/kv_cache.h"

namespace promptcache::testing_blocks {

// Two layers, `n_kv_heads` KV heads of `head_dim`, blocks of 4 tokens.
inline KvLayout Layout(KvType type = KvType::kF32, int n_kv_heads = 1, int head_dim = 4) {
  KvLayout l;
  l.n_layers = 2;
  l.n_kv_heads = n_kv_heads;
  l.head_dim = head_dim;
  l.type = type;
  l.block_size = 4;
  return l;
}

// n token ids, distinct for each salt.
inline std::vector<int32_t> Tokens(int n, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 100 + i + salt * 1000;
  return t;
}

// A sequence holding `tokens` at positions 0..n-1, each K/V element of layer l the token id
// + 0.5 l (an F32 layout).
inline KvSequence Computed(BlockPool* pool, const std::vector<int32_t>& tokens) {
  KvSequence seq(pool);
  std::vector<int32_t> pos(tokens.size());
  std::iota(pos.begin(), pos.end(), 0);
  PC_CHECK(seq.Append(pos).ok());
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (int l = 0; l < 2; ++l) {
      auto* k = reinterpret_cast<float*>(seq.SlotK(i, l));
      auto* v = reinterpret_cast<float*>(seq.SlotV(i, l));
      for (int d = 0; d < 4; ++d) k[d] = v[d] = tokens[i] + 0.5f * l;
    }
  }
  return seq;
}

// A test with a scratch folder of its own, `dir_` (`name` and the process id), absent when the
// test starts and removed when it ends.
class ScratchDirTest : public ::testing::Test {
 protected:
  explicit ScratchDirTest(const std::string& name)
      : dir_(std::filesystem::temp_directory_path() / (name + std::to_string(getpid()))) {}
  void SetUp() override { std::filesystem::remove_all(dir_); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
};

}  // namespace promptcache::testing_blocks
