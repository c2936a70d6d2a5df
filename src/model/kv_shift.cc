#include "model/kv_shift.h"

#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "ops/vec.h"

namespace promptcache {

Status AppendShifted(const ModelConfig& config, const KvSequence& src, int begin, int end,
                     int delta, KvSequence* dst) {
  PC_CHECK(src.pool() == dst->pool());
  PC_CHECK(0 <= begin && begin <= end && end <= src.size());
  const KvLayout& layout = src.pool()->layout();
  std::vector<int32_t> positions(end - begin);
  for (int i = begin; i < end; ++i) positions[i - begin] = src.Position(i) + delta;
  const int base = dst->size();
  PC_RETURN_IF_ERROR(dst->Append(positions));
  const int kv_dim = layout.kv_dim();
  const size_t row_bytes = size_t(kv_dim) * layout.elem_bytes();
  std::vector<float> k(kv_dim);
  for (int i = begin; i < end; ++i) {
    const int at = base + i - begin;
    for (int l = 0; l < layout.n_layers; ++l) {
      std::memcpy(dst->SlotV(at, l), src.SlotV(i, l), row_bytes);
      if (delta == 0) {
        std::memcpy(dst->SlotK(at, l), src.SlotK(i, l), row_bytes);
        continue;
      }
      if (layout.type == KvType::kF32) {
        std::memcpy(k.data(), src.SlotK(i, l), row_bytes);
      } else {
        const auto* h = reinterpret_cast<const uint16_t*>(src.SlotK(i, l));
        for (int d = 0; d < kv_dim; ++d) k[d] = F16ToF32(h[d]);
      }
      Rope(k.data(), layout.n_kv_heads, layout.head_dim, static_cast<float>(delta),
           config.inv_freq.data());
      if (layout.type == KvType::kF32) {
        std::memcpy(dst->SlotK(at, l), k.data(), row_bytes);
      } else {
        auto* h = reinterpret_cast<uint16_t*>(dst->SlotK(at, l));
        for (int d = 0; d < kv_dim; ++d) h[d] = F32ToF16(k[d]);
      }
    }
  }
  return Status::Ok();
}

}  // namespace promptcache
