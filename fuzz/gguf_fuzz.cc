// libFuzzer target for the GGUF parser: any input must give a Status or a file whose values can
// all be read and whose tensors lie inside the input.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "gguf/gguf.h"

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
  return 0;
}
