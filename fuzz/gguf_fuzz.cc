// libFuzzer target for the GGUF parser and the weight types: any input must give a Status or a
// file whose values can all be read and whose tensors lie inside the input; and every tensor of a
// type the kernels know, read as a weight matrix, must neither crash nor disagree with the
// references, whatever its bytes (NaN and infinite scales, any IQ4 index, any K-quant scale
// bits): its rows dequantized by the reference and decoded to the integer form, and its first
// rows packed (ops/packed.h) and multiplied on a target the input picks, equal bit for bit to the
// integer-form reference as MatMul promises.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "ops/matmul.h"
#include "ops/packed.h"
#include "ops/quant.h"
#include "ops/targets.h"
#include "ops/weight_types.h"

namespace {

volatile uint64_t g_sink;  // keeps the reads below from being optimised away

void Touch(const promptcache::GgufValue& v) {
  int64_t i = 0;
  double d = 0;
  bool b = false;
  std::string s;
  uint64_t acc = v.AsInt64(&i) ? static_cast<uint64_t>(i) : 0;
  acc += v.AsDouble(&d) ? 1 : 0;
  acc += v.AsBool(&b) ? b : 0;
  acc += v.AsString(&s) ? s.size() : 0;
  acc += v.is_integer() + v.is_float() + v.is_string();
  g_sink = g_sink + acc;
}

// Equal, or both NaN (whose payloads may differ).
bool Same(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

void FuzzWeights(const promptcache::GgufTensorInfo& t, uint64_t pick) {
  using namespace promptcache;
  const WeightTypeInfo* info = FindWeightType(t.type);
  if (info == nullptr) return;
  const int64_t cols = t.dims[0];
  const int64_t rows = t.elements() / cols;
  const size_t row_bytes = RowBytes(t.type, cols);
  // Every row through the reference dequantization (quant.h, by weight_types.h's table) and every
  // block to the integer form (bounded: inputs are small, but a long row of one-byte types could
  // still cost much).
  const int64_t n_rows = std::min<int64_t>(rows, std::max<int64_t>(1, (1 << 16) / cols));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < n_rows; ++r) {
    DequantizeRow(t.type, t.data + r * row_bytes, cols, row.data());
    for (float v : row) g_sink = g_sink + (v == v);
  }
  if (info->decode != nullptr) {
    IntBlock ib;
    for (int64_t b = 0; b < n_rows * (cols / info->block_elems); ++b) {
      info->decode(t.data + b * info->block_bytes, &ib);
      info->decode_scales(t.data + b * info->block_bytes, &ib);
      g_sink = g_sink + ib.q[0] + ib.sc[0] + (ib.d == ib.d);
    }
  }

  // The first rows (at most 9: a panel of 8 and a padded one) times 1 and 5 tokens (whole rows,
  // and the column-chunk path beyond 4 tokens).
  if (cols > 4096) return;
  WeightMatrix w{t.type, t.data, std::min<int64_t>(rows, 9), cols, row_bytes};
  constexpr int64_t kTokens = 5;
  std::vector<float> x(static_cast<size_t>(kTokens * cols));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(int(i * 37 % 17) - 8) * 0.25f;
  const std::vector<int64_t> targets = OpsTargets();
  ScopedOpsTarget target(targets[pick % targets.size()]);
  const size_t n = static_cast<size_t>(kTokens * w.rows);
  std::vector<float> got(n), want(n);
  if (info->act == ActFormat::kFloat) {
    MatMul(w, x.data(), kTokens, got.data(), nullptr);
    return;
  }
  MatMulIntFormReference(w, x.data(), kTokens, want.data());
  const PackedMatrix packed = PackMatrix(w, nullptr);
  for (const PackedMatrix* p : {static_cast<const PackedMatrix*>(nullptr), &packed}) {
    w.packed = p;
    for (int64_t tokens : {int64_t{1}, kTokens}) {
      MatMul(w, x.data(), tokens, got.data(), nullptr);
      for (size_t i = 0; i < static_cast<size_t>(tokens * w.rows); ++i) {
        if (!Same(got[i], want[i])) std::abort();
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace promptcache;
  auto r = GgufFile::FromMemory(data, size, "fuzz.gguf");
  if (!r.ok()) {
    if (r.status().message().empty()) std::abort();
    return 0;
  }
  const GgufFile& f = **r;
  if (f.alignment() == 0 || (f.alignment() & (f.alignment() - 1)) != 0) std::abort();
  for (const auto& [key, value] : f.metadata()) {
    if (f.Find(key) != &value) std::abort();
    Touch(value);
    for (const GgufValue& e : value.array) Touch(e);
    (void)f.GetInt(key);
    (void)f.GetFloat(key);
    (void)f.GetString(key);
    (void)f.GetBool(key);
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    if (f.FindTensor(t.name) != &t) std::abort();
    if (t.data < data || t.nbytes > size || t.data + t.nbytes > data + size) std::abort();
    if (t.nbytes != RowBytes(t.type, t.elements())) std::abort();
    g_sink = g_sink + GgmlTypeName(t.type).size();
    // Reading the first and last byte lets AddressSanitizer check the extent independently.
    if (t.nbytes > 0) g_sink = g_sink + t.data[0] + t.data[t.nbytes - 1];
  }
  // The input's size picks the target, so mutations that only change bytes keep it.
  for (const GgufTensorInfo& t : f.tensors()) FuzzWeights(t, size);
  return 0;
}
