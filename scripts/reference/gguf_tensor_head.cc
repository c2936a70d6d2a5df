// The stored bytes of a GGUF tensor's first N values, as read by a llama.cpp build's own GGUF
// reader, for src/ops/testdata/llama_dequant (the i-quant samples): not part of the build.
// Writes OUT.bin (the N values' blocks as stored) and OUT.f32 (N little-endian float32: the
// build's own dequantization of those bytes, its type traits' to_float; for an F32 tensor, the
// values).
// usage: gguf_tensor_head MODEL.gguf TENSOR N OUT
//   P=/work/peers/ik_llama.cpp L=$P/build/ggml/src
//   g++ -std=c++17 -I$P/ggml/include scripts/reference/gguf_tensor_head.cc -L$L -lggml
//       -Wl,-rpath,$L -o /tmp/gguf_tensor_head
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml.h"

static int Fail(const char* what, const char* path) {
  std::fprintf(stderr, "gguf_tensor_head: %s %s\n", what, path);
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: gguf_tensor_head MODEL.gguf TENSOR N OUT\n");
    return 2;
  }
  const int64_t n = std::atoll(argv[3]);
  if (n <= 0) return Fail("N must be a positive count of values, not", argv[3]);
  gguf_init_params params = {true, nullptr};
  gguf_context* ctx = gguf_init_from_file(argv[1], params);
  if (ctx == nullptr) return 1;
  const int t = gguf_find_tensor(ctx, argv[2]);
  if (t < 0) {
    std::fprintf(stderr, "no tensor %s\n", argv[2]);
    return 1;
  }
  const ggml_type type = gguf_get_tensor_type(ctx, t);
  if (n % ggml_blck_size(type) != 0) return Fail("N is not a whole number of blocks for", argv[2]);
  const size_t bytes = ggml_row_size(type, n);
  std::vector<unsigned char> data(bytes);
  FILE* f = std::fopen(argv[1], "rb");
  if (f == nullptr) return Fail("cannot read", argv[1]);
  std::fseek(f, static_cast<long>(gguf_get_data_offset(ctx) + gguf_get_tensor_offset(ctx, t)),
             SEEK_SET);
  if (std::fread(data.data(), 1, bytes, f) != bytes) return 1;
  std::fclose(f);
  std::vector<float> values(n);
  ggml_init_params ip = {0, nullptr, true};
  ggml_context* g = ggml_init(ip);  // ggml's f16 tables, where it uses them
  if (type == GGML_TYPE_F32) {
    std::memcpy(values.data(), data.data(), bytes);
  } else {
    ggml_internal_get_type_traits(type).to_float(data.data(), values.data(), n);
  }
  ggml_free(g);
  const std::string out = argv[4];
  FILE* b = std::fopen((out + ".bin").c_str(), "wb");
  FILE* v = std::fopen((out + ".f32").c_str(), "wb");
  if (b == nullptr || v == nullptr) return Fail("cannot write", (out + ".bin/.f32").c_str());
  std::fwrite(data.data(), 1, bytes, b);
  std::fclose(b);
  std::fwrite(values.data(), 4, n, v);
  std::fclose(v);
  std::printf("%s %s: %s, %zu bytes\n", argv[1], argv[2], ggml_type_name(type), bytes);
  gguf_free(ctx);
  return 0;
}
