// Tiled attention (attention.h) against the plain softmax reference (vec_reference.h), on every
// Highway target: many head sizes, query counts, tile fills and causal cut-offs, f16 and f32
// rows; and the batch invariance the model relies on: a query's result is bit-identical alone,
// in a pair, among many, and from f16 rows or the same values in f32. Q8_0 and Q4_0 rows, read
// in place at odd byte offsets, give bit-identically what f32 rows of the values the scalar
// reference dequantizer (ops/quant.h) decodes from them give.
#include "ops/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "gguf/gguf.h"
#include "ops/for_each_target.h"
#include "ops/quant.h"
#include "ops/targets.h"
#include "ops/vec_reference.h"

namespace promptcache {
namespace {

// Keys and values as f16 rows `stride` elements apart (as in a KV cache row holding several
// heads), and the same values in f32.
struct Rows {
  int n, dim, stride;
  std::vector<uint16_t> k16, v16;
  std::vector<float> k, v;  // dense [n, dim], the f16 values widened

  Rows(int n_, int dim_, std::mt19937& rng) : n(n_), dim(dim_), stride(dim_ * 3 + 1) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    k16.resize(size_t(n) * stride + 1);
    v16.resize(size_t(n) * stride + 1);
    for (auto& x : k16) x = F32ToF16(2.0f * dist(rng));
    for (auto& x : v16) x = F32ToF16(dist(rng));
    k.resize(size_t(n) * dim);
    v.resize(size_t(n) * dim);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < dim; ++j) {
        k[size_t(i) * dim + j] = F16ToF32(k16[1 + size_t(i) * stride + j]);
        v[size_t(i) * dim + j] = F16ToF32(v16[1 + size_t(i) * stride + j]);
      }
    }
  }

  // Tile of rows [r0, r0 + count): f16 rows in place (misaligned by one element), or f32.
  AttnTile Tile(int r0, int count, bool f16) const {
    AttnTile t;
    t.type = f16 ? AttnRowType::kF16 : AttnRowType::kF32;
    t.n = count;
    for (int r = 0; r < count; ++r) {
      const size_t i = size_t(r0 + r);
      t.k[r] = f16 ? static_cast<const void*>(&k16[1 + i * stride]) : &k[i * dim];
      t.v[r] = f16 ? static_cast<const void*>(&v16[1 + i * stride]) : &v[i * dim];
    }
    return t;
  }
};

// Runs n_q queries over the rows tile by tile; query i sees keys [first[i], limit[i]) (first
// empty: from 0). Tiles a query has no key of are not given to it, as the model does.
template <class R>
std::vector<std::vector<float>> AttendAll(const R& rows, const std::vector<std::vector<float>>& q,
                                          const std::vector<int>& limit, AttnScoring sc, bool f16,
                                          const std::vector<int>& first = {}) {
  const int n_q = static_cast<int>(q.size()), dim = rows.dim;
  std::vector<std::vector<float>> out(n_q, std::vector<float>(dim, 0.0f));
  std::vector<AttnState> st(n_q);
  for (int t0 = 0; t0 < rows.n; t0 += kAttnTileRows) {
    const int count = std::min(kAttnTileRows, rows.n - t0);
    const AttnTile tile = rows.Tile(t0, count, f16);
    std::vector<const float*> qp;
    std::vector<int> fv, nv;
    std::vector<AttnState*> sp;
    std::vector<float*> op;
    for (int i = 0; i < n_q; ++i) {
      const int lo = first.empty() ? 0 : first[i];
      if (limit[i] <= t0 || lo >= t0 + count) continue;
      qp.push_back(q[i].data());
      fv.push_back(std::max(0, lo - t0));
      nv.push_back(std::min(count, limit[i] - t0));
      sp.push_back(&st[i]);
      op.push_back(out[i].data());
    }
    AttendTile(tile, dim, sc, static_cast<int>(qp.size()), qp.data(),
               first.empty() ? nullptr : fv.data(), nv.data(), sp.data(), op.data());
  }
  for (int i = 0; i < n_q; ++i) {
    for (float& x : out[i]) x /= st[i].sum;
  }
  return out;
}

std::vector<std::vector<float>> AttendAll(const Rows& rows,
                                          const std::vector<std::vector<float>>& q,
                                          const std::vector<int>& limit, float scale, bool f16) {
  return AttendAll(rows, q, limit, AttnScoring{scale}, f16);
}

TEST(Attention, MatchesReference) {
  ForEachTarget([] {
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int dim : {1, 4, 8, 13, 64, 128}) {
      // One tile partly or just filled, a row into the next, and three tiles.
      for (int n : {1, 5, kAttnTileRows, kAttnTileRows + 1, 2 * kAttnTileRows + 44}) {
        const Rows rows(n, dim, rng);
        const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
        for (int n_q : {1, 2, 3, 7, 20}) {
          std::vector<std::vector<float>> q(n_q, std::vector<float>(dim));
          std::vector<int> limit(n_q);
          for (int i = 0; i < n_q; ++i) {
            for (float& x : q[i]) x = dist(rng);
            limit[i] = std::max(1, n - i * 7);  // causal: later queries see fewer keys
          }
          for (bool f16 : {true, false}) {
            const auto got = AttendAll(rows, q, limit, scale, f16);
            for (int i = 0; i < n_q; ++i) {
              std::vector<float> want(dim);
              reference::Attention(q[i].data(), rows.k.data(), rows.v.data(), limit[i], dim, scale,
                                   want.data());
              for (int j = 0; j < dim; ++j) {
                ASSERT_NEAR(got[i][j], want[j], 2e-5f * (1.0f + std::fabs(want[j])))
                    << "dim " << dim << " n " << n << " queries " << n_q << " f16 " << f16;
              }
            }
          }
        }
      }
    }
  });
}

// Sliding windows (a first valid key inside or at the start of a tile, whole tiles skipped)
// and Gemma 2's soft-capped scores, against the reference; and a windowed query's result is the
// same alone as among queries with other windows.
TEST(Attention, WindowsAndSoftcapMatchReference) {
  ForEachTarget([] {
    std::mt19937 rng(13);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (int dim : {8, 64, 256}) {
      for (int n : {5, kAttnTileRows + 1, 2 * kAttnTileRows + 44}) {
        const Rows rows(n, dim, rng);
        for (float softcap : {0.0f, 2.0f, 50.0f}) {
          const AttnScoring sc{1.0f / std::sqrt(static_cast<float>(dim)), softcap};
          const int n_q = 6;
          std::vector<std::vector<float>> q(n_q, std::vector<float>(dim));
          std::vector<int> first(n_q), limit(n_q);
          for (int i = 0; i < n_q; ++i) {
            for (float& x : q[i]) x = 3.0f * dist(rng);  // large scores: the cap matters
            limit[i] = std::max(1, n - 5 * i);
            first[i] = std::max(0, limit[i] - (1 + 13 * i));  // windows of 1, 14, 27, ... keys
          }
          for (bool f16 : {true, false}) {
            const auto got = AttendAll(rows, q, limit, sc, f16, first);
            for (int i = 0; i < n_q; ++i) {
              std::vector<float> want(dim);
              reference::Attention(q[i].data(), rows.k.data(), rows.v.data(), limit[i], dim,
                                   sc.scale, want.data(), softcap, first[i]);
              for (int j = 0; j < dim; ++j) {
                ASSERT_NEAR(got[i][j], want[j], 2e-5f * (1.0f + std::fabs(want[j])))
                    << "dim " << dim << " n " << n << " cap " << softcap << " query " << i;
              }
              const auto alone = AttendAll(rows, {q[i]}, {limit[i]}, sc, f16, {first[i]});
              ASSERT_EQ(alone[0], got[i]) << "dim " << dim << " n " << n << " query " << i;
            }
          }
        }
      }
    }
  });
}

// Alone, in a pair and among many (calls of 25 queries decode the tile once, in groups of
// their own: ops/attention.cc), from f16 rows or the same values in f32.
TEST(Attention, QueryResultDoesNotDependOnItsCompany) {
  ForEachTarget([] {
    std::mt19937 rng(4);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    constexpr int kQueries = 25;
    for (int dim : {8, 64, 100, 128, 256}) {
      const int n = 2 * kAttnTileRows + 13;
      const Rows rows(n, dim, rng);
      std::vector<std::vector<float>> q(kQueries, std::vector<float>(dim));
      std::vector<int> limit(kQueries);
      for (int i = 0; i < kQueries; ++i) {
        for (float& x : q[i]) x = dist(rng);
        limit[i] = n - 3 * i;
      }
      const auto all = AttendAll(rows, q, limit, 0.125f, /*f16=*/true);
      const auto f32 = AttendAll(rows, q, limit, 0.125f, /*f16=*/false);
      for (int i = 0; i < kQueries; ++i) {
        const auto alone = AttendAll(rows, {q[i]}, {limit[i]}, 0.125f, true);
        const int partner = (i + 4) % kQueries;
        const auto pair =
            AttendAll(rows, {q[partner], q[i]}, {limit[partner], limit[i]}, 0.125f, true);
        for (int j = 0; j < dim; ++j) {
          ASSERT_EQ(all[i][j], alone[0][j]) << dim << " " << i;
          ASSERT_EQ(all[i][j], pair[1][j]) << dim << " " << i;
          ASSERT_EQ(all[i][j], f32[i][j]) << dim << " " << i;
        }
      }
    }
  });
}

TEST(Attention, MergingSplitsEqualsOnePass) {
  ForEachTarget([] {
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const int dim = 64, n = 96;
    const Rows rows(n, dim, rng);
    std::vector<float> q(dim);
    for (float& x : q) x = dist(rng);
    // Keys [0, 64) and [64, 96) separately, merged, against the reference over all 96.
    AttnState a, b;
    std::vector<float> oa(dim, 0.0f), ob(dim, 0.0f), merged(dim, 0.0f);
    const float* qp = q.data();
    for (int t0 : {0, 32}) {
      AttnTile tile = rows.Tile(t0, 32, true);
      AttnState* sp = &a;
      float* op = oa.data();
      const int nv = 32;
      AttendTile(tile, dim, AttnScoring{0.125f}, 1, &qp, nullptr, &nv, &sp, &op);
    }
    {
      AttnTile tile = rows.Tile(64, 32, true);
      AttnState* sp = &b;
      float* op = ob.data();
      const int nv = 32;
      AttendTile(tile, dim, AttnScoring{0.125f}, 1, &qp, nullptr, &nv, &sp, &op);
    }
    AttnState m;
    MergeAttention(AttnState{}, ob.data(), &m, merged.data(), dim);  // empty: no change
    EXPECT_EQ(m.sum, 0.0f);
    MergeAttention(a, oa.data(), &m, merged.data(), dim);  // into empty: exact copy
    EXPECT_EQ(m.sum, a.sum);
    EXPECT_EQ(merged, oa);
    MergeAttention(b, ob.data(), &m, merged.data(), dim);
    std::vector<float> want(dim);
    reference::Attention(q.data(), rows.k.data(), rows.v.data(), n, dim, 0.125f, want.data());
    for (int j = 0; j < dim; ++j) EXPECT_NEAR(merged[j] / m.sum, want[j], 2e-5f);
  });
}

// Keys and values quantized to Q8_0 or Q4_0 as the KV cache stores them: each token's row holds
// `heads` heads of dim values in blocks of 32 over the whole row (a head may start inside a
// block), rows `stride` bytes apart at odd byte offsets (the kernel must not assume alignment);
// and the values the reference dequantizer decodes, as f32 rows of one head.
struct QuantRows {
  int n, dim, heads, head;
  size_t block_bytes, row_bytes, stride;
  AttnRowType type;
  std::vector<uint8_t> kq, vq;
  std::vector<float> k, v;  // dense [n, dim]: head `head`'s values, dequantized

  QuantRows(int n_, int dim_, int heads_, AttnRowType type_, std::mt19937& rng)
      : n(n_), dim(dim_), heads(heads_), head(heads_ - 1), type(type_) {
    const GgmlType g = type == AttnRowType::kQ8_0 ? GgmlType::kQ8_0 : GgmlType::kQ4_0;
    const int width = heads * dim;  // a multiple of 32
    block_bytes = type == AttnRowType::kQ8_0 ? 34 : 18;
    row_bytes = size_t(width) / 32 * block_bytes;
    stride = row_bytes + 5;
    std::normal_distribution<float> dist(0.0f, 1.0f);
    kq.resize(size_t(n) * stride + 1);
    vq.resize(size_t(n) * stride + 1);
    k.resize(size_t(n) * dim);
    v.resize(size_t(n) * dim);
    std::vector<float> x(width), back(width);
    for (int i = 0; i < n; ++i) {
      for (float& e : x) e = 2.0f * dist(rng);
      QuantizeRow(g, x.data(), width, &kq[1 + i * stride]);
      DequantizeRow(g, &kq[1 + i * stride], width, back.data());
      std::copy_n(back.begin() + head * dim, dim, k.begin() + size_t(i) * dim);
      for (float& e : x) e = dist(rng);
      QuantizeRow(g, x.data(), width, &vq[1 + i * stride]);
      DequantizeRow(g, &vq[1 + i * stride], width, back.data());
      std::copy_n(back.begin() + head * dim, dim, v.begin() + size_t(i) * dim);
    }
  }

  // Tile of rows [r0, r0 + count) of the last head: quantized in place (pointing at the block
  // the head starts in), or (`dequantized`) the f32 values.
  AttnTile Tile(int r0, int count, bool dequantized) const {
    AttnTile t;
    t.type = dequantized ? AttnRowType::kF32 : type;
    t.column = dequantized ? 0 : head * dim % 32;
    t.n = count;
    const size_t at = 1 + size_t(head * dim / 32) * block_bytes;
    for (int r = 0; r < count; ++r) {
      const size_t i = size_t(r0 + r);
      t.k[r] = dequantized ? static_cast<const void*>(&k[i * dim]) : &kq[at + i * stride];
      t.v[r] = dequantized ? static_cast<const void*>(&v[i * dim]) : &vq[at + i * stride];
    }
    return t;
  }
};

// Heads of 8 to 256 values, the last of 1 to 4 heads in a row: whole blocks read in place, and
// heads starting inside a block (8 x 4: stories260K's; 16, 48) decoded a tile at a time.
TEST(Attention, QuantizedRowsMatchTheirDequantizedValues) {
  ForEachTarget([] {
    std::mt19937 rng(21);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const std::pair<int, int> shapes[] = {{8, 4},  {16, 2}, {48, 2},  {32, 1},
                                          {64, 2}, {96, 1}, {128, 1}, {256, 1}};
    for (AttnRowType type : {AttnRowType::kQ8_0, AttnRowType::kQ4_0}) {
      for (const auto& [dim, heads] : shapes) {
        for (int n : {1, 5, kAttnTileRows, kAttnTileRows + 1, 2 * kAttnTileRows + 44}) {
          const QuantRows rows(n, dim, heads, type, rng);
          const AttnScoring sc{1.0f / std::sqrt(static_cast<float>(dim))};
          for (int n_q : {1, 2, 3, 4, 7, 20}) {
            std::vector<std::vector<float>> q(n_q, std::vector<float>(dim));
            std::vector<int> limit(n_q), first(n_q);
            for (int i = 0; i < n_q; ++i) {
              for (float& x : q[i]) x = dist(rng);
              limit[i] = std::max(1, n - i * 7);
              first[i] = i % 2 == 0 ? 0 : std::max(0, limit[i] - 20);  // some windowed
            }
            const std::string where = std::string(type == AttnRowType::kQ8_0 ? "q8_0" : "q4_0") +
                                      " dim " + std::to_string(dim) + " x " +
                                      std::to_string(heads) + " n " + std::to_string(n) +
                                      " queries " + std::to_string(n_q);
            const auto got = AttendAll(rows, q, limit, sc, /*dequantized=*/false, first);
            const auto f32 = AttendAll(rows, q, limit, sc, /*dequantized=*/true, first);
            for (int i = 0; i < n_q; ++i) {
              ASSERT_EQ(got[i], f32[i]) << where << " query " << i;
              std::vector<float> want(dim);
              reference::Attention(q[i].data(), rows.k.data(), rows.v.data(), limit[i], dim,
                                   sc.scale, want.data(), 0.0f, first[i]);
              for (int j = 0; j < dim; ++j) {
                ASSERT_NEAR(got[i][j], want[j], 2e-5f * (1.0f + std::fabs(want[j])))
                    << where << " query " << i;
              }
              const auto alone = AttendAll(rows, {q[i]}, {limit[i]}, sc, false, {first[i]});
              ASSERT_EQ(alone[0], got[i]) << where << " query " << i;
            }
          }
        }
      }
    }
  });
}

}  // namespace
}  // namespace promptcache
