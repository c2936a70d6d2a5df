// Writes src/ops/iq_grids.h: the codebooks of the low-bit i-quant GGUF types (IQ1_S, IQ1_M,
// IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S), read back out of a llama.cpp build's own
// dequantization. Not part of the build: compiled against a built ggml (ik_llama.cpp's here), it
// needs no private symbol. For each codebook entry it dequantizes a block whose first grid index
// is that entry (super-block scale 1, group scale 0, no sign bits) and recovers the entry's
// magnitudes from the floats; the sign rule (seven stored bits, the eighth making the parity
// even) is checked the same way. Each entry is written in our compact form: the level index of
// each element, 2 bits (IQ2, IQ1) or 3 bits (IQ3) each, element 0 in the lowest bits.
// usage: iq_grids_dump > src/ops/iq_grids.h   (the build command is in the header it writes)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ggml.h"

namespace {

constexpr uint16_t kOne = 0x3C00;  // f16 1.0

std::vector<float> Dequantize(ggml_type type, const std::vector<uint8_t>& block) {
  std::vector<float> out(256);
  ggml_internal_get_type_traits(type).to_float(block.data(), out.data(), 256);
  return out;
}

[[noreturn]] void Fail(const char* what, int index) {
  std::fprintf(stderr, "iq_grids_dump: unexpected value in %s entry %d\n", what, index);
  std::exit(1);
}

// The index of v in levels (exact), or a failure.
int Level(const std::vector<int>& levels, float v, const char* what, int index) {
  for (size_t i = 0; i < levels.size(); ++i) {
    if (static_cast<float>(levels[i]) == v) return static_cast<int>(i);
  }
  Fail(what, index);
}

struct Grid {
  const char* name;
  const char* doc;
  std::vector<int> levels;
  int elems, bits;
  std::vector<uint16_t> entries;
};

// One codebook: `make(index)` is the block whose first group uses entry `index`, `scale` what
// the dequantized first elements are to be multiplied by to give the magnitudes (minus `offset`
// for IQ1's grid, whose elements come with a +1/8 shift).
template <class Make>
Grid Read(const char* name, const char* doc, ggml_type type, int count, int elems,
          std::vector<int> levels, int bits, float scale, float offset, Make make) {
  Grid g{name, doc, levels, elems, bits, {}};
  for (int i = 0; i < count; ++i) {
    const std::vector<float> y = Dequantize(type, make(i));
    uint16_t packed = 0;
    for (int j = 0; j < elems; ++j) {
      packed |= static_cast<uint16_t>(Level(levels, y[j] * scale - offset, name, i) << (bits * j));
    }
    g.entries.push_back(packed);
  }
  return g;
}

template <class T>
void Put(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(v));
}

void Print(const Grid& g) {
  std::printf("\n// %s\n", g.doc);
  std::printf("inline constexpr int8_t %sLevels[%zu] = {", g.name, g.levels.size());
  for (size_t i = 0; i < g.levels.size(); ++i) std::printf("%s%d", i ? ", " : "", g.levels[i]);
  std::printf("};\n");
  std::printf("inline constexpr uint16_t %s[%zu] = {", g.name, g.entries.size());
  for (size_t i = 0; i < g.entries.size(); ++i) {
    std::printf("%s0x%04x,", i % 12 == 0 ? "\n    " : " ", g.entries[i]);
  }
  std::printf("\n};\n");
}

}  // namespace

int main() {
  ggml_init_params params = {0, nullptr, true};
  ggml_context* ctx = ggml_init(params);  // sets up ggml's f16 tables where it uses them
  std::vector<Grid> grids;
  // IQ2_XXS: 8 grid bytes then 4 x 7 sign bits and the 4-bit scale per 32; scale 0: d / 8.
  grids.push_back(Read("kIQ2XxsGrid", "IQ2_XXS: 256 entries of 8 magnitudes.", GGML_TYPE_IQ2_XXS,
                       256, 8, {8, 25, 43}, 2, 8.0f, 0.0f, [](int i) {
                         std::vector<uint8_t> b(66, 0);
                         Put(b, 0, kOne);
                         b[2] = static_cast<uint8_t>(i);
                         return b;
                       }));
  grids.push_back(Read("kIQ2XsGrid", "IQ2_XS: 512 entries of 8 magnitudes.", GGML_TYPE_IQ2_XS, 512,
                       8, {8, 25, 43}, 2, 8.0f, 0.0f, [](int i) {
                         std::vector<uint8_t> b(74, 0);
                         Put(b, 0, kOne);
                         Put(b, 2, static_cast<uint16_t>(i));
                         return b;
                       }));
  grids.push_back(Read("kIQ2SGrid", "IQ2_S: 1024 entries of 8 magnitudes.", GGML_TYPE_IQ2_S, 1024,
                       8, {8, 25, 43, 62}, 2, 8.0f, 0.0f, [](int i) {
                         std::vector<uint8_t> b(82, 0);
                         Put(b, 0, kOne);
                         b[2] = static_cast<uint8_t>(i & 255);
                         b[2 + 64] = static_cast<uint8_t>(i >> 8);  // qh: bits 0-1, group 0
                         return b;
                       }));
  grids.push_back(Read("kIQ3XxsGrid", "IQ3_XXS: 256 entries of 4 magnitudes.", GGML_TYPE_IQ3_XXS,
                       256, 4, {4, 12, 20, 28, 36, 44, 52, 62}, 3, 4.0f, 0.0f, [](int i) {
                         std::vector<uint8_t> b(98, 0);
                         Put(b, 0, kOne);
                         b[2] = static_cast<uint8_t>(i);
                         return b;
                       }));
  grids.push_back(Read("kIQ3SGrid", "IQ3_S: 512 entries of 4 magnitudes.", GGML_TYPE_IQ3_S, 512, 4,
                       {1, 3, 5, 7, 9, 11, 13, 15}, 3, 1.0f, 0.0f, [](int i) {
                         std::vector<uint8_t> b(110, 0);
                         Put(b, 0, kOne);
                         b[2] = static_cast<uint8_t>(i & 255);
                         b[2 + 64] = static_cast<uint8_t>(i >> 8);  // qh bit 0: the 9th bit
                         return b;
                       }));
  grids.push_back(Read("kIQ1SGrid",
                       "IQ1_S / IQ1_M: 2048 entries of 8 values (before the +-1/8 shift).",
                       GGML_TYPE_IQ1_S, 2048, 8, {-1, 0, 1}, 2, 1.0f, 0.125f, [](int i) {
                         std::vector<uint8_t> b(50, 0);
                         Put(b, 0, kOne);
                         b[2] = static_cast<uint8_t>(i & 255);
                         Put(b, 34, static_cast<uint16_t>(i >> 8));  // qh[0] bits 0-2
                         return b;
                       }));
  // The signs: IQ2_XXS entry 0 (all 8s) with 7 stored sign bits s; element 7's sign makes the
  // number of minus signs even.
  for (int s = 0; s < 128; ++s) {
    std::vector<uint8_t> b(66, 0);
    Put(b, 0, kOne);
    Put(b, 6, static_cast<uint32_t>(s));
    const std::vector<float> y = Dequantize(GGML_TYPE_IQ2_XXS, b);
    const int want = s | (__builtin_popcount(s) & 1) << 7;
    for (int j = 0; j < 8; ++j) {
      if ((y[j] < 0) != ((want >> j & 1) != 0)) Fail("the sign rule", s);
    }
  }
  ggml_free(ctx);
  // The header's opening paragraph and the command that regenerates it.
  const char* const kDoc[] = {
      "The codebooks of the low-bit i-quant GGUF types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,",
      "IQ3_XXS, IQ3_S): format data every reader must hold exactly, like kIQ4Values. Each entry",
      "gives the level index of each of its elements, 2 bits (IQ2, IQ1) or 3 bits (IQ3) each,",
      "element 0 in the lowest bits; the element's magnitude (IQ1: value) is Levels[index].",
      "",
      "Generated, not written by hand: scripts/reference/iq_grids_dump.cc reads every entry back",
      "out of a llama.cpp build's own dequantization (ik_llama.cpp's, /work/peers) and checks the",
      "sign rule (7 stored bits, the 8th making the count of minus signs even). To regenerate:",
      "  P=/work/peers/ik_llama.cpp L=$P/build/ggml/src",
      "  g++ -std=c++17 -I$P/ggml/include scripts/reference/iq_grids_dump.cc -L$L -lggml",
      "      -Wl,-rpath,$L -o /tmp/iq_grids_dump && /tmp/iq_grids_dump > src/ops/iq_grids.h",
  };
  for (const char* line : kDoc) std::printf("//%s%s\n", *line ? " " : "", line);
  std::printf("#pragma once\n\n#include <cstdint>\n\n// clang-format off\n");
  std::printf("namespace promptcache::quant {\n");
  for (const Grid& g : grids) Print(g);
  std::printf("\n}  // namespace promptcache::quant\n// clang-format on\n");
  return 0;
}
