#include "ops/quant.h"

#include <cstring>

#include "core/check.h"
#include "core/fp16.h"
#include "ops/vec.h"
#include "ops/weight_types.h"

namespace promptcache {

bool RowConversionSupports(GgmlType type) {
  const WeightTypeInfo* t = FindWeightType(type);
  return t != nullptr;
}

bool QuantizeSupports(GgmlType type) {
  const WeightTypeInfo* t = FindWeightType(type);
  return t != nullptr && (t->act == ActFormat::kFloat || t->quantize != nullptr);
}

void DequantizeRow(GgmlType type, const void* src, int64_t n, float* dst) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
      F16ToF32Row(static_cast<const uint16_t*>(src), dst, n);
      return;
    case GgmlType::kBF16: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, s + 2 * i, 2);
        dst[i] = BF16ToF32(v);
      }
      return;
    }
    default:
      break;
  }
  const WeightTypeInfo* t = FindWeightType(type);
  PC_CHECK(t != nullptr && t->dequantize != nullptr && "DequantizeRow: unsupported type");
  PC_CHECK(n % t->block_elems == 0);
  const auto* s = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / t->block_elems; ++b) {
    t->dequantize(s + b * t->block_bytes, dst + b * t->block_elems);
  }
}

void QuantizeRow(GgmlType type, const float* src, int64_t n, void* dst) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
      F32ToF16Row(src, static_cast<uint16_t*>(dst), n);
      return;
    case GgmlType::kBF16: {
      auto* d = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t v = F32ToBF16(src[i]);
        std::memcpy(d + 2 * i, &v, 2);
      }
      return;
    }
    default:
      break;
  }
  const WeightTypeInfo* t = FindWeightType(type);
  PC_CHECK(t != nullptr && t->quantize != nullptr && "QuantizeRow: unsupported type");
  PC_CHECK(n % t->block_elems == 0);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / t->block_elems; ++b) {
    t->quantize(src + b * t->block_elems, d + b * t->block_bytes);
  }
}

}  // namespace promptcache
