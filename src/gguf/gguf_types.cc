// GGUF type tables and metadata values: the size and name of each tensor element type, and the
// typed accessors of GgufValue and GgufTensorInfo. Split from gguf.cc, which holds the parser and
// the GgufFile that owns its result.
#include <cmath>
#include <limits>

#include "gguf/gguf.h"

namespace promptcache {

namespace {
struct TypeEntry {
  GgmlType type;
  const char* name;
  GgmlTypeTraits traits;
};

constexpr TypeEntry kTypes[] = {
    {GgmlType::kF32, "F32", {1, 4}},
    {GgmlType::kF16, "F16", {1, 2}},
    {GgmlType::kQ4_0, "Q4_0", {32, 18}},
    {GgmlType::kQ4_1, "Q4_1", {32, 20}},
    {GgmlType::kQ5_0, "Q5_0", {32, 22}},
    {GgmlType::kQ5_1, "Q5_1", {32, 24}},
    {GgmlType::kQ8_0, "Q8_0", {32, 34}},
    {GgmlType::kQ8_1, "Q8_1", {32, 36}},
    {GgmlType::kQ2_K, "Q2_K", {256, 84}},
    {GgmlType::kQ3_K, "Q3_K", {256, 110}},
    {GgmlType::kQ4_K, "Q4_K", {256, 144}},
    {GgmlType::kQ5_K, "Q5_K", {256, 176}},
    {GgmlType::kQ6_K, "Q6_K", {256, 210}},
    {GgmlType::kQ8_K, "Q8_K", {256, 292}},
    {GgmlType::kI8, "I8", {1, 1}},
    {GgmlType::kI16, "I16", {1, 2}},
    {GgmlType::kI32, "I32", {1, 4}},
    {GgmlType::kI64, "I64", {1, 8}},
    {GgmlType::kF64, "F64", {1, 8}},
    {GgmlType::kBF16, "BF16", {1, 2}},
    // Types known by size, so a file holding them parses and the loader can name what it lacks.
    {GgmlType::kIQ2_XXS, "IQ2_XXS", {256, 66}},
    {GgmlType::kIQ2_XS, "IQ2_XS", {256, 74}},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", {256, 98}},
    {GgmlType::kIQ1_S, "IQ1_S", {256, 50}},
    {GgmlType::kIQ4_NL, "IQ4_NL", {32, 18}},
    {GgmlType::kMXFP4, "MXFP4", {32, 17}},
    {GgmlType::kIQ3_S, "IQ3_S", {256, 110}},
    {GgmlType::kIQ2_S, "IQ2_S", {256, 82}},
    {GgmlType::kIQ4_XS, "IQ4_XS", {256, 136}},
    {GgmlType::kIQ1_M, "IQ1_M", {256, 56}},
    {GgmlType::kTQ1_0, "TQ1_0", {256, 54}},
    {GgmlType::kTQ2_0, "TQ2_0", {256, 66}},
};

const TypeEntry* FindType(GgmlType t) {
  for (const TypeEntry& e : kTypes) {
    if (e.type == t) return &e;
  }
  return nullptr;
}

}  // namespace

std::string GgmlTypeName(GgmlType t) {
  const TypeEntry* e = FindType(t);
  return e ? e->name : "type " + std::to_string(static_cast<uint32_t>(t));
}

GgmlTypeTraits GetTypeTraits(GgmlType t) {
  const TypeEntry* e = FindType(t);
  return e ? e->traits : GgmlTypeTraits{0, 0};
}

size_t RowBytes(GgmlType t, int64_t n) {
  const GgmlTypeTraits tr = GetTypeTraits(t);
  if (tr.block_elems == 0 || n < 0) return 0;
  return static_cast<size_t>(n / tr.block_elems) * static_cast<size_t>(tr.block_bytes);
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kU16:
    case GgufValueType::kI16:
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kU64:
    case GgufValueType::kI64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_float() const {
  return type == GgufValueType::kF32 || type == GgufValueType::kF64;
}

bool GgufValue::AsInt64(int64_t* out) const {
  if (!is_integer()) return false;
  if (const int64_t* v = std::get_if<int64_t>(&scalar)) {
    *out = *v;
    return true;
  }
  if (const uint64_t* v = std::get_if<uint64_t>(&scalar)) {
    if (*v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(*v);
    return true;
  }
  return false;
}

bool GgufValue::AsDouble(double* out) const {
  if (is_float()) {
    if (const double* v = std::get_if<double>(&scalar)) {
      *out = *v;
      return true;
    }
    return false;
  }
  if (!is_integer()) return false;
  if (const int64_t* v = std::get_if<int64_t>(&scalar)) {
    *out = static_cast<double>(*v);
    return true;
  }
  if (const uint64_t* v = std::get_if<uint64_t>(&scalar)) {
    *out = static_cast<double>(*v);
    return true;
  }
  return false;
}

bool GgufValue::AsBool(bool* out) const {
  const bool* v = type == GgufValueType::kBool ? std::get_if<bool>(&scalar) : nullptr;
  if (v == nullptr) return false;
  *out = *v;
  return true;
}

bool GgufValue::AsString(std::string* out) const {
  const std::string* v =
      type == GgufValueType::kString ? std::get_if<std::string>(&scalar) : nullptr;
  if (v == nullptr) return false;
  *out = *v;
  return true;
}

int64_t GgufTensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

}  // namespace promptcache
