#include "model/kv_shift.h"

#include <cstring>
#include <vector>

#include "model/kv_rows.h"
#include "ops/vec.h"

namespace promptcache {

Status AppendShifted(const ModelConfig& config, const KvSequence& src, int begin, int end,
                     int delta, KvSequence* dst, ThreadPool* pool) {
  PC_CHECK(src.pool() == dst->pool());
  PC_CHECK(0 <= begin && begin <= end && end <= src.size());
  BlockPool* blocks = src.pool();
  const KvLayout& layout = blocks->layout();
  const int n = end - begin;
  std::vector<int32_t> positions(n);
  for (int i = 0; i < n; ++i) positions[i] = src.Position(begin + i) + delta;
  const int base = dst->size();
  PC_RETURN_IF_ERROR(dst->Append(positions));
  // Each token's (block, slot) on both sides, found once: every layer has the same layout.
  auto slots = [](const KvSequence& seq, int from, int count) {
    std::vector<KvSpan> out;
    out.reserve(count);
    int skip = from;
    for (const KvSpan& s : seq.spans()) {
      for (int j = 0; j < s.count && static_cast<int>(out.size()) < count; ++j) {
        if (skip > 0) {
          --skip;
          continue;
        }
        out.push_back({s.block, s.begin + j, 1, s.sliding, s.shift});
      }
    }
    return out;
  };
  const std::vector<KvSpan> from = slots(src, begin, n), to = slots(*dst, base, n);
  const int kv_dim = layout.kv_dim();
  const size_t row_bytes = layout.row_bytes();
  auto layer_job = [&](int64_t l0, int64_t l1) {
    std::vector<float> k(kv_dim);
    for (int l = static_cast<int>(l0); l < l1; ++l) {
      for (int i = 0; i < n; ++i) {
        const size_t src_at = size_t(from[i].begin) * row_bytes;
        const size_t dst_at = size_t(to[i].begin) * row_bytes;
        std::memcpy(blocks->V(to[i].block, l) + dst_at, blocks->V(from[i].block, l) + src_at,
                    row_bytes);
        const uint8_t* ks = blocks->K(from[i].block, l) + src_at;
        uint8_t* kd = blocks->K(to[i].block, l) + dst_at;
        // A shifted source span's keys are rotated for its block's positions.
        const int rotate = delta + from[i].shift;
        if (rotate == 0) {
          std::memcpy(kd, ks, row_bytes);
          continue;
        }
        // Quantized keys are decoded, rotated and quantized again: one more rounding than
        // keys computed at their new positions (the shared-span path rotates queries instead).
        LoadKvRow(layout.type, ks, kv_dim, k.data());
        ApplyRope(config, l, k.data(), layout.n_kv_heads, static_cast<float>(rotate));
        StoreKvRow(layout.type, k.data(), kv_dim, kd);
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(layout.n_layers, layer_job);
  } else {
    layer_job(0, layout.n_layers);
  }
  return Status::Ok();
}

}  // namespace promptcache
