// The 512-bit pair kernels of packed_kernels.cc (AVX-512 with VNNI, many tokens): included by it
// once per Highway target, inside its namespaces, after the 256-bit kernels whose helpers these
// use; compiled only for the AVX-512 targets.
//
// Many tokens on CPUs with AVX-512 VNNI: two consecutive panels side by side in one 512-bit
// vector (rows 8p .. 8p + 15), so each vpdpbusd does the work of two 256-bit ones (CPUs that run
// 512-bit vectors at full width do twice the integer products per cycle). Every lane's
// arithmetic is the 256-bit kernel's: the same integer sums, scaled and accumulated in the same
// order, so results are bit-identical.

HWY_INLINE __m512 JoinF(__m256 lo, __m256 hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}
HWY_INLINE __m512i Dot512(__m512i acc, __m512i w, __m512i x) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
  return acc;
}
HWY_INLINE __m512i Broadcast4x16(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
template <int N>
HWY_INLINE __m512i SumSplit512(const __m512i* v) {
  if constexpr (N == 4) {
    return _mm512_add_epi32(_mm512_add_epi32(v[0], v[1]), _mm512_add_epi32(v[2], v[3]));
  } else if constexpr (N == 2) {
    return _mm512_add_epi32(v[0], v[1]);
  } else {
    return v[0];
  }
}
// The 16 rows' f16 values at offset `at` of two panels' groups.
HWY_INLINE __m512 Halves2(const uint8_t* g0, const uint8_t* g1, int at) {
  return JoinF(Halves(g0 + at), Halves(g1 + at));
}

// 32-element blocks [b0, b0 + n): HP pairs of panels (g[2hp], g[2hp + 1]) x T tokens.
template <class F, int HP, int T>
HWY_INLINE void Blocks32x2(const uint8_t* const* g, int n, int64_t skip, const TokenActs* tok,
                           __m512 (&acc)[HP][T]) {
  constexpr int kSplit = SplitFor<T>();
  constexpr int kGB = F::f.group_bytes;
  constexpr int kShift = F::kBias ? __builtin_ctz(F::kBias) : 0;
  for (int b = 0; b < n; ++b) {
    __m512i I[HP][T][kSplit];
    HWY_UNROLL(8)
    for (int h = 0; h < 2 * HP; ++h) {
      for (int o = 0; o < kGB; o += 64)
        hwy::Prefetch(Ahead(g[h], b * kGB + kPf32 + o, n * kGB, skip));
    }
    HWY_UNROLL(8)
    for (int h = 0; h < HP; ++h) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        HWY_UNROLL(4)
        for (int a = 0; a < kSplit; ++a) I[h][t][a] = _mm512_setzero_si512();
      }
    }
    HWY_UNROLL(8)
    for (int G = 0; G < 8; ++G) {
      __m512i W[HP];
      HWY_UNROLL(8)
      for (int h = 0; h < HP; ++h) {
        W[h] = F::Group2(g[2 * h] + b * kGB, g[2 * h + 1] + b * kGB, G);
      }
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        const __m512i X = Broadcast4x16(tok[t].q + 32 * b + 4 * G);
        HWY_UNROLL(8)
        for (int h = 0; h < HP; ++h) I[h][t][G % kSplit] = Dot512(I[h][t][G % kSplit], W[h], X);
      }
    }
    // The rows' scales (and minimums) once per panel pair, for all the tokens.
    __m512 rd[HP], rm[HP];
    HWY_UNROLL(8)
    for (int h = 0; h < HP; ++h) {
      rd[h] = Halves2(g[2 * h] + b * kGB, g[2 * h + 1] + b * kGB, 0);
      if constexpr (F::kMin) {
        rm[h] = Halves2(g[2 * h] + b * kGB, g[2 * h + 1] + b * kGB, F::f.m_offset);
      }
    }
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_set1_ps(tok[t].d[b]);
      HWY_UNROLL(8)
      for (int h = 0; h < HP; ++h) {
        __m512i isum = SumSplit512<kSplit>(I[h][t]);
        if constexpr (kShift != 0) {
          isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(tok[t].sums[b] << kShift));
        }
        const __m512 dd = _mm512_mul_ps(rd[h], dx);
        acc[h][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dd, acc[h][t]);
        if constexpr (F::kMin) {
          acc[h][t] = _mm512_fmadd_ps(rm[h], _mm512_set1_ps(tok[t].s[b]), acc[h][t]);
        }
      }
    }
  }
}

// Correction() for the 16 rows of two panels, in two halves that each serve many products: the
// rows' coefficient pairs (coef[j][r], coef[j + 1][r]) as int16, per panel pair, and a token's
// activation sums over the same groups, paired; c = their multiply-add (exact in any order).
template <int kSub>
HWY_INLINE void CoefPairs2(const uint8_t* coef0, const uint8_t* coef1, __m512i* pairs) {
  constexpr int kGroups = 256 / kSub;
  HWY_UNROLL(8)
  for (int j = 0; j < kGroups; j += 2) {
    auto pairs_of = [&](const uint8_t* coef) {
      const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(coef + j * 8));
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(coef + (j + 1) * 8));
      return _mm_unpacklo_epi8(a, b);
    };
    pairs[j / 2] = _mm512_cvtepi8_epi16(_mm256_set_m128i(pairs_of(coef1), pairs_of(coef0)));
  }
}
template <int kSub>
HWY_INLINE void SumPairs(const int16_t* sums, int32_t* out) {
  constexpr int kGroups = 256 / kSub;
  HWY_UNROLL(8)
  for (int j = 0; j < kGroups; j += 2) {
    if constexpr (kSub == 16) {
      std::memcpy(&out[j / 2], sums + j, 4);
    } else {  // groups of 32: two sums of 16 each
      const int lo = sums[2 * j] + sums[2 * j + 1], hi = sums[2 * j + 2] + sums[2 * j + 3];
      out[j / 2] =
          static_cast<int32_t>(static_cast<uint16_t>(lo) | static_cast<uint32_t>(hi) << 16);
    }
  }
}
template <int kSub>
HWY_INLINE __m512i Correction2(const __m512i* pairs, const int32_t* sums) {
  constexpr int kGroups = 256 / kSub;
  __m512i c = _mm512_setzero_si512();
  HWY_UNROLL(8)
  for (int j = 0; j < kGroups / 2; ++j) {
    // vpdpwssd: the int16 pairs' multiply-add added to c in one instruction (no saturation).
    const __m512i x = _mm512_set1_epi32(sums[j]);
    asm("vpdpwssd %2, %1, %0" : "+v"(c) : "v"(pairs[j]), "v"(x));
  }
  return c;
}

// K super-blocks [s0, s0 + n): HP pairs of panels x T tokens.
// The accumulators live in the output rows (out[h][t], 16 floats under mask[h]), read and
// written once per super-block: with the super-block's integer sums they would need more
// registers than there are (measured: a third of the loop's instructions were spills).
template <int HP, int T>
struct OutTile {
  float* p[HP][T];
  __mmask16 mask[HP];
  template <class Fn>
  HWY_INLINE void Update(int h, int t, Fn fn) const {
    _mm512_mask_storeu_ps(p[h][t], mask[h], fn(_mm512_maskz_loadu_ps(mask[h], p[h][t])));
  }
};

template <class F, int HP, int T>
HWY_INLINE void Blocks256x2(const uint8_t* const* g, int n, int64_t skip, const TokenActs* tok,
                            const OutTile<HP, T>& out) {
  constexpr int kGB = F::f.group_bytes;
  constexpr int kSub = F::f.sub;
  constexpr int kShift = F::kBias ? __builtin_ctz(F::kBias) : 0;
  constexpr int kSplit = SplitFor<T>();
  constexpr int kLines = (kGB + 63) / 64, kLinesPerJ = (kLines + 256 / kSub - 1) / (256 / kSub);
  for (int s = 0; s < n; ++s) {
    __m512i S[HP][T];
    HWY_UNROLL(8)
    for (int h = 0; h < HP; ++h) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) S[h][t] = _mm512_setzero_si512();
    }
    auto sub_block = [&](int j) __attribute__((always_inline)) {
      __m512i I[HP][T][kSplit];
      HWY_UNROLL(8)
      for (int h = 0; h < 2 * HP; ++h) {
        HWY_UNROLL(8)
        for (int l = j * kLinesPerJ; l < (j + 1) * kLinesPerJ && l < kLines; ++l) {
          hwy::Prefetch(Ahead(g[h], (s + kAheadGroups) * kGB + l * 64, n * kGB, skip));
        }
      }
      HWY_UNROLL(8)
      for (int h = 0; h < HP; ++h) {
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) {
          HWY_UNROLL(4)
          for (int a = 0; a < kSplit; ++a) I[h][t][a] = _mm512_setzero_si512();
        }
      }
      // The groups' addresses hidden from the compiler per sub-block: sub-blocks j and
      // j + 256 / kSub / 2 of 4-bit types read the same bytes (low and high nibbles), and where
      // both are in one unrolled body, merging their loads kept the second half's bytes live
      // across it, spilled (a third of the instructions); reloading them is cheaper.
      const uint8_t* gj[2 * HP];
      HWY_UNROLL(8)
      for (int h = 0; h < 2 * HP; ++h) {
        gj[h] = g[h] + s * kGB;
        asm("" : "+r"(gj[h]));
      }
      HWY_UNROLL(8)
      for (int i = 0; i < kSub / 4; ++i) {
        const int G = j * (kSub / 4) + i;
        __m512i W[HP];
        HWY_UNROLL(8)
        for (int h = 0; h < HP; ++h) W[h] = F::Group2(gj[2 * h], gj[2 * h + 1], G);
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) {
          const __m512i X = Broadcast4x16(tok[t].q + 256 * s + 4 * G);
          HWY_UNROLL(8)
          for (int h = 0; h < HP; ++h) {
            I[h][t][i % kSplit] = Dot512(I[h][t][i % kSplit], W[h], X);
          }
        }
      }
      HWY_UNROLL(8)
      for (int h = 0; h < HP; ++h) {
        const int at = F::f.sc_offset + j * 8;
        const __m128i sc8 = _mm_unpacklo_epi64(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g[2 * h] + s * kGB + at)),
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g[2 * h + 1] + s * kGB + at)));
        const __m512i sc = _mm512_cvtepi8_epi32(sc8);
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) {
          S[h][t] = _mm512_add_epi32(S[h][t], _mm512_mullo_epi32(SumSplit512<kSplit>(I[h][t]), sc));
        }
      }
    };
    // Eight sub-blocks (Q4_K, Q5_K) unrolled whole, sixteen (Q6_K, Q3_K, Q2_K) as a loop: their
    // unrolled code outgrew the CPU's decoded-instruction cache (BM_MatMul, 512 tokens: Q6_K
    // 28% longer), while Q4_K unrolled is faster with the weights streamed from memory.
    UnrolledFor<kSub == 32 ? 8 : 1>(256 / kSub, sub_block);
    // The correction's coefficient pairs once per panel pair and super-block, the activation-sum
    // pairs once per token. Types with minimums walk panel pairs outermost so that only one pair's
    // coefficients are live at a time (all of them would crowd out the accumulators).
    constexpr int kPairs = 256 / kSub / 2;
    int32_t sums[T][kPairs];
    if constexpr (F::kMin || kShift != 0) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) SumPairs<kSub>(tok[t].sums + 16 * s, sums[t]);
    }
    if constexpr (F::kMin) {
      HWY_UNROLL(8)
      for (int h = 0; h < HP; ++h) {
        const uint8_t* g0 = g[2 * h] + s * kGB;
        const uint8_t* g1 = g[2 * h + 1] + s * kGB;
        __m512i coef[kPairs];
        CoefPairs2<kSub>(g0 + F::f.mn_offset, g1 + F::f.mn_offset, coef);
        const __m512 rd = Halves2(g0, g1, 0), rm = Halves2(g0, g1, F::f.m_offset);
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t) {
          const __m512 dx = _mm512_set1_ps(tok[t].d[s]);
          const __m512i c = Correction2<kSub>(coef, sums[t]);
          out.Update(h, t, [&](__m512 a) {
            a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[h][t]), _mm512_mul_ps(rd, dx), a);
            return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(c), _mm512_mul_ps(rm, dx), a);
          });
        }
      }
    } else {
      __m512i coef[HP][kShift != 0 ? kPairs : 1];
      __m512 rd[HP];
      HWY_UNROLL(8)
      for (int h = 0; h < HP; ++h) {
        rd[h] = Halves2(g[2 * h] + s * kGB, g[2 * h + 1] + s * kGB, 0);
        if constexpr (kShift != 0) {
          constexpr int at = F::f.sc_offset;
          CoefPairs2<kSub>(g[2 * h] + s * kGB + at, g[2 * h + 1] + s * kGB + at, coef[h]);
        }
      }
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        const __m512 dx = _mm512_set1_ps(tok[t].d[s]);
        HWY_UNROLL(8)
        for (int h = 0; h < HP; ++h) {
          const __m512 dd = _mm512_mul_ps(rd[h], dx);
          __m512i sum = S[h][t];
          if constexpr (kShift != 0) {
            sum = _mm512_sub_epi32(sum,
                                   _mm512_slli_epi32(Correction2<kSub>(coef[h], sums[t]), kShift));
          }
          out.Update(h, t,
                     [&](__m512 a) { return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), dd, a); });
        }
      }
    }
  }
}

// RunTile for 2 * HP consecutive panels from p0 (whole pairs of them), 512-bit.
template <class F, int HP, int T>
void RunTile512(const MatMulJob& job, const PackedMatrix& pm, int64_t p0, int64_t b0, int n,
                int64_t t0) {
  const int64_t cols = pm.cols, rows = pm.rows;
  const int64_t x_blocks = cols / (F::kK ? 256 : 32), x_sums = cols / (F::kK ? 16 : 32);
  const int64_t k0 = b0 * (F::kK ? 256 : 32);
  TokenActs tok[T];
  HWY_UNROLL(8)
  for (int t = 0; t < T; ++t) {
    const int64_t i = t0 + t;
    tok[t] = {job.xq.q + i * cols + k0, job.xq.d + i * x_blocks + b0,
              job.xq.sums + i * x_sums + k0 / (F::kK ? 16 : 32),
              F::kK ? nullptr : job.xq.s + i * x_blocks + b0};
  }
  const uint8_t* g[2 * HP];
  HWY_UNROLL(8)
  for (int h = 0; h < 2 * HP; ++h) g[h] = pm.Group(std::min(p0 + h, (rows - 1) / 8), b0);
  OutTile<HP, T> out;
  HWY_UNROLL(8)
  for (int h = 0; h < HP; ++h) {
    const int64_t valid = std::clamp<int64_t>(rows - 8 * (p0 + 2 * h), 0, 16);
    out.mask[h] = static_cast<__mmask16>((1u << valid) - 1);
    HWY_UNROLL(8)
    for (int t = 0; t < T; ++t) out.p[h][t] = job.out + (t0 + t) * rows + 8 * (p0 + 2 * h);
  }
  if constexpr (F::kK) {
    if (b0 == 0) {
      HWY_UNROLL(8)
      for (int h = 0; h < HP; ++h) {
        HWY_UNROLL(8)
        for (int t = 0; t < T; ++t)
          _mm512_mask_storeu_ps(out.p[h][t], out.mask[h], _mm512_setzero_ps());
      }
    }
    Blocks256x2<F, HP, T>(g, n, 0, tok, out);
  } else {
    __m512 acc[HP][T];
    HWY_UNROLL(8)
    for (int h = 0; h < HP; ++h) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) {
        acc[h][t] = b0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(out.mask[h], out.p[h][t]);
      }
    }
    Blocks32x2<F, HP, T>(g, n, 0, tok, acc);
    HWY_UNROLL(8)
    for (int h = 0; h < HP; ++h) {
      HWY_UNROLL(8)
      for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(out.p[h][t], out.mask[h], acc[h][t]);
    }
  }
}

template <class F, int HP, int T>
void RunTokens512(const MatMulJob& job, const PackedMatrix& pm, int64_t p0, int64_t b0, int n,
                  int64_t t0, int64_t t1) {
  for (; t0 + T <= t1; t0 += T) RunTile512<F, HP, T>(job, pm, p0, b0, n, t0);
  switch (t1 - t0) {
    case 5:
      if constexpr (T > 5) return RunTile512<F, HP, 5>(job, pm, p0, b0, n, t0);
      return;
    case 4:
      if constexpr (T > 4) return RunTile512<F, HP, 4>(job, pm, p0, b0, n, t0);
      return;
    case 3:
      return RunTile512<F, HP, 3>(job, pm, p0, b0, n, t0);
    case 2:
      return RunTile512<F, HP, 2>(job, pm, p0, b0, n, t0);
    case 1:
      return RunTile512<F, HP, 1>(job, pm, p0, b0, n, t0);
    default:
      return;
  }
}
