#include "model/kv_rows.h"

#include "gguf/gguf.h"
#include "ops/quant.h"

namespace promptcache {
namespace {

GgmlType RowGgmlType(KvType type) {
  switch (type) {
    case KvType::kF16:
      return GgmlType::kF16;
    case KvType::kF32:
      return GgmlType::kF32;
    case KvType::kQ8_0:
      return GgmlType::kQ8_0;
    case KvType::kQ4_0:
      return GgmlType::kQ4_0;
  }
  return GgmlType::kF32;
}

}  // namespace

void StoreKvRow(KvType type, const float* x, int n, uint8_t* dst) {
  QuantizeRow(RowGgmlType(type), x, n, dst);
}

void LoadKvRow(KvType type, const uint8_t* src, int n, float* x) {
  DequantizeRow(RowGgmlType(type), src, n, x);
}

}  // namespace promptcache
