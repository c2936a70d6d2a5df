#include "model/kv_rows.h"

#include "core/check.h"
#include "ops/quant.h"

namespace promptcache {
namespace {

// Each KV row type with its names in ggml and in the attention kernels.
struct KvRowNames {
  KvType kv;
  GgmlType ggml;
  AttnRowType attn;
};

constexpr KvRowNames kKvRowNames[] = {
    {KvType::kF16, GgmlType::kF16, AttnRowType::kF16},
    {KvType::kF32, GgmlType::kF32, AttnRowType::kF32},
    {KvType::kQ8_0, GgmlType::kQ8_0, AttnRowType::kQ8_0},
    {KvType::kQ4_0, GgmlType::kQ4_0, AttnRowType::kQ4_0},
};

const KvRowNames& NamesOf(KvType type) {
  for (const KvRowNames& n : kKvRowNames) {
    if (n.kv == type) return n;
  }
  PC_CHECK(false && "unknown KvType");
  return kKvRowNames[0];
}

}  // namespace

GgmlType KvRowGgmlType(KvType type) { return NamesOf(type).ggml; }

AttnRowType KvRowAttnType(KvType type) { return NamesOf(type).attn; }

void StoreKvRow(KvType type, const float* x, int n, uint8_t* dst) {
  QuantizeRow(KvRowGgmlType(type), x, n, dst);
}

void LoadKvRow(KvType type, const uint8_t* src, int n, float* x) {
  DequantizeRow(KvRowGgmlType(type), src, n, x);
}

}  // namespace promptcache
