#include "ops/iq_decode.h"

#include <cstring>

#include "core/fp16.h"
#include "ops/iq_grids.h"
#include "ops/quant_blocks.h"

namespace promptcache::quant {
namespace {

template <typename Block>
Block Load(const uint8_t* p) {
  Block b;
  std::memcpy(&b, p, sizeof(b));
  return b;
}

uint32_t Dword(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The n elements of codebook entry `entry` (bits per element `bits`, magnitudes `levels`) with
// sign bits `signs` (bit j: element j negative) into q.
void Entry(uint16_t entry, const int8_t* levels, int bits, int n, int signs, int8_t* q) {
  for (int j = 0; j < n; ++j) {
    const int m = levels[(entry >> (bits * j)) & ((1 << bits) - 1)];
    q[j] = static_cast<int8_t>(signs >> j & 1 ? -m : m);
  }
}

// One 4-bit scale s per 32 elements (groups g): sc = 2s + 1 for both halves.
void Scales32(const int s[8], IntBlock* o) {
  for (int g = 0; g < 8; ++g) {
    o->sc[2 * g] = o->sc[2 * g + 1] = static_cast<int16_t>(2 * s[g] + 1);
    o->mn[2 * g] = o->mn[2 * g + 1] = 0;
  }
  o->m = 0;
}

// IQ2_XS / IQ2_S: a nibble per 16 elements.
void Scales16(const uint8_t scales[8], IntBlock* o) {
  for (int g = 0; g < 8; ++g) {
    o->sc[2 * g] = static_cast<int16_t>(2 * (scales[g] & 15) + 1);
    o->sc[2 * g + 1] = static_cast<int16_t>(2 * (scales[g] >> 4) + 1);
    o->mn[2 * g] = o->mn[2 * g + 1] = 0;
  }
  o->m = 0;
}

}  // namespace

// ---------------------------------------------------------------- IQ2

void ScalesIQ2_XXS(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ2_XXS>(p);
  int s[8];
  for (int g = 0; g < 8; ++g) s[g] = static_cast<int>(b.qs[4 * g + 3] >> 12);
  Scales32(s, o);
  o->d = F16ToF32(b.d) * 0.125f;
}

void DecodeIQ2_XXS(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ2_XXS>(p);
  const auto* bytes = reinterpret_cast<const uint8_t*>(b.qs);
  for (int g = 0; g < 8; ++g) {
    const uint32_t signs = Dword(bytes + 8 * g + 4);
    for (int l = 0; l < 4; ++l) {
      Entry(kIQ2XxsGrid[bytes[8 * g + l]], kIQ2XxsGridLevels, 2, 8,
            IQ2SignBits(static_cast<int>(signs >> (7 * l) & 127)), o->q + 32 * g + 8 * l);
    }
  }
  ScalesIQ2_XXS(p, o);
}

void ScalesIQ2_XS(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ2_XS>(p);
  Scales16(b.scales, o);
  o->d = F16ToF32(b.d) * 0.125f;
}

void DecodeIQ2_XS(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ2_XS>(p);
  for (int i = 0; i < 32; ++i) {
    Entry(kIQ2XsGrid[b.qs[i] & 511], kIQ2XsGridLevels, 2, 8, IQ2SignBits(b.qs[i] >> 9),
          o->q + 8 * i);
  }
  ScalesIQ2_XS(p, o);
}

void ScalesIQ2_S(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ2_S>(p);
  Scales16(b.scales, o);
  o->d = F16ToF32(b.d) * 0.125f;
}

void DecodeIQ2_S(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ2_S>(p);
  for (int i = 0; i < 32; ++i) {
    const int index = b.qs[i] | ((b.qh[i / 4] >> (2 * (i % 4))) & 3) << 8;
    Entry(kIQ2SGrid[index], kIQ2SGridLevels, 2, 8, b.qs[32 + i], o->q + 8 * i);
  }
  ScalesIQ2_S(p, o);
}

// ---------------------------------------------------------------- IQ3

void ScalesIQ3_XXS(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ3_XXS>(p);
  int s[8];
  for (int g = 0; g < 8; ++g) s[g] = static_cast<int>(Dword(b.qs + 64 + 4 * g) >> 28);
  Scales32(s, o);
  o->d = F16ToF32(b.d) * 0.25f;
}

void DecodeIQ3_XXS(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ3_XXS>(p);
  for (int g = 0; g < 8; ++g) {
    const uint32_t signs = Dword(b.qs + 64 + 4 * g);
    for (int l = 0; l < 4; ++l) {
      const int bits = IQ2SignBits(static_cast<int>(signs >> (7 * l) & 127));
      int8_t* q = o->q + 32 * g + 8 * l;
      Entry(kIQ3XxsGrid[b.qs[8 * g + 2 * l]], kIQ3XxsGridLevels, 3, 4, bits, q);
      Entry(kIQ3XxsGrid[b.qs[8 * g + 2 * l + 1]], kIQ3XxsGridLevels, 3, 4, bits >> 4, q + 4);
    }
  }
  ScalesIQ3_XXS(p, o);
}

void ScalesIQ3_S(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ3_S>(p);
  int s[8];
  for (int g = 0; g < 8; ++g) s[g] = (b.scales[g / 2] >> (4 * (g % 2))) & 15;
  Scales32(s, o);
  o->d = F16ToF32(b.d);
}

void DecodeIQ3_S(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ3_S>(p);
  for (int i = 0; i < 64; ++i) {  // 4 elements per index
    const int g = i / 8, k = i % 8;
    const int index = b.qs[i] | ((b.qh[g] >> k) & 1) << 8;
    const int signs = b.signs[i / 2] >> (4 * (i % 2));
    Entry(kIQ3SGrid[index], kIQ3SGridLevels, 3, 4, signs, o->q + 4 * i);
  }
  ScalesIQ3_S(p, o);
}

// ---------------------------------------------------------------- IQ1

// IQ1_S / IQ1_M: 8 elements of entry `index` with the shift's sign `minus`: 8 * v +- 1.
void EntryIQ1(int index, bool minus, int8_t* q) {
  const uint16_t entry = kIQ1SGrid[index];
  for (int j = 0; j < 8; ++j) {
    q[j] = static_cast<int8_t>(8 * kIQ1SGridLevels[(entry >> (2 * j)) & 3] + (minus ? -1 : 1));
  }
}

void ScalesIQ1_S(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ1_S>(p);
  int s[8];
  for (int g = 0; g < 8; ++g) s[g] = (b.qh[g] >> 12) & 7;
  Scales32(s, o);
  o->d = F16ToF32(b.d) * 0.125f;
}

void DecodeIQ1_S(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ1_S>(p);
  for (int g = 0; g < 8; ++g) {
    for (int l = 0; l < 4; ++l) {
      const int index = b.qs[4 * g + l] | ((b.qh[g] >> (3 * l)) & 7) << 8;
      EntryIQ1(index, (b.qh[g] & 0x8000) != 0, o->q + 32 * g + 8 * l);
    }
  }
  ScalesIQ1_S(p, o);
}

void ScalesIQ1_M(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ1_M>(p);
  uint16_t w[4];
  std::memcpy(w, b.scales, 8);
  const uint16_t d = static_cast<uint16_t>((w[0] >> 12) | (w[1] >> 12) << 4 | (w[2] >> 12) << 8 |
                                           (w[3] >> 12) << 12);
  for (int h = 0; h < 16; ++h) {  // 3 bits per 16 elements, four per word
    o->sc[h] = static_cast<int16_t>(2 * ((w[h / 4] >> (3 * (h % 4))) & 7) + 1);
    o->mn[h] = 0;
  }
  o->d = F16ToF32(d) * 0.125f;
  o->m = 0;
}

void DecodeIQ1_M(const uint8_t* p, IntBlock* o) {
  const auto b = Load<BlockIQ1_M>(p);
  for (int i = 0; i < 32; ++i) {  // 8 elements per index
    const int nibble = (b.qh[i / 2] >> (4 * (i % 2))) & 15;
    EntryIQ1(b.qs[i] | (nibble & 7) << 8, (nibble & 8) != 0, o->q + 8 * i);
  }
  ScalesIQ1_M(p, o);
}

}  // namespace promptcache::quant
