// The tensor-type rules of quant_mix.h. They follow llama.cpp's quantizer for the file types
// listed below and the tensors of Llama-style models, mixtures of experts included: a rule names
// a tensor role (attn_v, ffn_down, ...), the file types it applies to and the type it gives.
// Expert tensors (ffn_{gate,up,down}_exps, 3-D) take their dense namesakes' rules, by the layer
// in their name; the routers (ffn_gate_inp) stay as they are. llama.cpp singles out models of
// exactly 8 experts (Mixtral), whose attention is small beside its experts: attn_k and attn_v
// Q8_0, attn_output Q5_K in the lower mixes.
#include "model/quant_mix.h"

#include <strings.h>

#include <cstdio>
#include <utility>

namespace promptcache {
namespace {

constexpr QuantFileType kFileTypes[] = {
    {"F32", 0, GgmlType::kF32},        {"F16", 1, GgmlType::kF16},
    {"BF16", 32, GgmlType::kBF16},     {"Q8_0", 7, GgmlType::kQ8_0},
    {"Q4_0", 2, GgmlType::kQ4_0},      {"Q4_1", 3, GgmlType::kQ4_1},
    {"Q5_0", 8, GgmlType::kQ5_0},      {"Q5_1", 9, GgmlType::kQ5_1},
    {"IQ4_NL", 25, GgmlType::kIQ4_NL}, {"IQ4_XS", 30, GgmlType::kIQ4_XS},
    {"Q2_K", 10, GgmlType::kQ2_K},     {"Q3_K_S", 11, GgmlType::kQ3_K},
    {"Q3_K_M", 12, GgmlType::kQ3_K},   {"Q3_K_L", 13, GgmlType::kQ3_K},
    {"Q4_K_S", 14, GgmlType::kQ4_K},   {"Q4_K_M", 15, GgmlType::kQ4_K},
    {"Q5_K_S", 16, GgmlType::kQ5_K},   {"Q5_K_M", 17, GgmlType::kQ5_K},
    {"Q6_K", 18, GgmlType::kQ6_K},     {"MXFP4", 38, GgmlType::kMXFP4},
};

// File type ids the rules test (llama.cpp's LLAMA_FTYPE_MOSTLY_*).
enum FileTypeId : uint32_t {
  kQ2_K = 10,
  kQ3_K_S = 11,
  kQ3_K_M = 12,
  kQ3_K_L = 13,
  kQ4_K_S = 14,
  kQ4_K_M = 15,
  kQ5_K_M = 17,
  kIQ4_NL = 25,
  kIQ4_XS = 30,
};

bool IsFloat(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16;
}

bool Contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The layer of a "blk.N." tensor, or 0.
int LayerOf(const std::string& name) {
  int layer = 0;
  return std::sscanf(name.c_str(), "blk.%d.", &layer) == 1 ? layer : 0;
}

// The layers that get more bits in the *_M mixes: the first and last eighth, and every third
// layer between.
bool UseMoreBits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

GgmlType AttnVType(uint32_t f, const QuantMixModel& m, int layer, GgmlType t) {
  if (f == kQ2_K) {
    t = m.n_gqa >= 4 ? GgmlType::kQ4_K : GgmlType::kQ3_K;
  } else if (f == kQ3_K_M) {
    t = layer < 2 ? GgmlType::kQ5_K : GgmlType::kQ4_K;
  } else if (f == kQ3_K_L) {
    t = GgmlType::kQ5_K;
  } else if ((f == kIQ4_NL || f == kIQ4_XS) && m.n_gqa >= 4) {
    t = GgmlType::kQ5_K;
  } else if ((f == kQ4_K_M || f == kQ5_K_M) && UseMoreBits(layer, m.n_attn_v)) {
    t = GgmlType::kQ6_K;
  } else if (f == kQ4_K_S && layer < 4) {
    t = GgmlType::kQ5_K;
  }
  // 70B shares each V head among 8 query heads: V is small, and more bits there are cheap.
  if (m.is_70b && (t == GgmlType::kQ3_K || t == GgmlType::kQ4_K)) t = GgmlType::kQ5_K;
  return t;
}

GgmlType FfnDownType(uint32_t f, const QuantMixModel& m, int layer, GgmlType t) {
  const int n = m.n_layer;
  if (f == kQ2_K) return GgmlType::kQ3_K;
  if (f == kQ3_K_M) return layer < n / 16 ? GgmlType::kQ5_K : GgmlType::kQ4_K;
  if (f == kQ3_K_L) return GgmlType::kQ5_K;
  if (f == kQ4_K_M || f == kQ5_K_M) return UseMoreBits(layer, n) ? GgmlType::kQ6_K : t;
  if ((f == kIQ4_NL || f == kIQ4_XS || f == kQ4_K_S) && layer < n / 8) return GgmlType::kQ5_K;
  return t;
}

GgmlType AttnOutputType(uint32_t f, const QuantMixModel& m, GgmlType t) {
  if (m.n_expert == 8) {
    for (uint32_t lower : {kQ2_K, kQ3_K_S, kQ3_K_M, kIQ4_NL, kQ4_K_S, kQ4_K_M, kIQ4_XS}) {
      if (f == lower) return GgmlType::kQ5_K;
    }
    return t;
  }
  if (f == kQ2_K) return GgmlType::kQ3_K;
  if (f == kQ3_K_M) return GgmlType::kQ4_K;
  if (f == kQ3_K_L) return GgmlType::kQ5_K;
  return t;
}

GgmlType AttnQkvType(uint32_t f, GgmlType t) {
  if (f == kQ3_K_M || f == kQ3_K_L) return GgmlType::kQ4_K;
  if (f == kQ4_K_M) return GgmlType::kQ5_K;
  if (f == kQ5_K_M) return GgmlType::kQ6_K;
  return t;
}

int BlockOf(GgmlType t) { return GetTypeTraits(t).block_elems; }

}  // namespace

Result<QuantFileType> ParseQuantFileType(const std::string& name) {
  std::string wanted = name;
  for (const char* alias : {"Q3_K", "Q4_K", "Q5_K"}) {
    if (strcasecmp(name.c_str(), alias) == 0) wanted = std::string(alias) + "_M";
  }
  for (const QuantFileType& f : kFileTypes) {
    if (strcasecmp(f.name, wanted.c_str()) == 0) return f;
  }
  std::string known;
  for (const std::string& n : QuantFileTypeNames()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgument("unknown quantization type '" + name + "' (known: " + known + ")");
}

std::vector<std::string> QuantFileTypeNames() {
  std::vector<std::string> names;
  for (const QuantFileType& f : kFileTypes) names.push_back(f.name);
  return names;
}

uint32_t FileTypeIdFor(GgmlType type) {
  switch (type) {
    case GgmlType::kQ3_K:
      return kQ3_K_M;
    case GgmlType::kQ4_K:
      return kQ4_K_M;
    case GgmlType::kQ5_K:
      return kQ5_K_M;
    default:
      break;
  }
  for (const QuantFileType& f : kFileTypes) {
    if (f.base == type) return f.id;
  }
  return 0;
}

QuantMixModel QuantMixModelFromGguf(const GgufFile& file) {
  QuantMixModel m;
  const Result<std::string> arch = file.GetString("general.architecture");
  const std::string a = arch.ok() ? *arch : "";
  // Per-layer arrays (some architectures have them) read as missing: the defaults stand.
  const Result<int64_t> layers = file.GetIntOr(a + ".block_count", 0);
  const Result<int64_t> heads = file.GetIntOr(a + ".attention.head_count", 0);
  const Result<int64_t> kv = file.GetIntOr(a + ".attention.head_count_kv", heads.ok() ? *heads : 0);
  m.n_layer = layers.ok() ? static_cast<int>(*layers) : 0;
  if (heads.ok() && kv.ok() && *kv > 0) m.n_gqa = static_cast<int>(*heads / *kv);
  m.has_output = file.FindTensor("output.weight") != nullptr;
  for (const GgufTensorInfo& t : file.tensors()) {
    if (Contains(t.name, "attn_v.weight") || Contains(t.name, "attn_qkv.weight") ||
        Contains(t.name, "attn_kv_b.weight")) {
      ++m.n_attn_v;
    }
  }
  const Result<int64_t> experts = file.GetIntOr(a + ".expert_count", 0);
  m.n_expert = experts.ok() ? static_cast<int>(*experts) : 0;
  // llama.cpp's 70B class: 80 layers with grouped-query attention (Llama-1 65B has none).
  m.is_70b = a == "llama" && m.n_layer == 80 && heads.ok() && kv.ok() && *heads != *kv;
  return m;
}

bool IsQuantizableTensor(const std::string& name, std::span<const int64_t> dims) {
  size_t n_dims = dims.size();
  while (n_dims > 1 && dims[n_dims - 1] == 1) --n_dims;
  const size_t n = name.size();
  if (n < 6 || name.compare(n - 6, 6, "weight") != 0 || n_dims < 2) return false;
  for (const char* kept : {"_norm.weight", "ffn_gate_inp.weight", "ssm_conv1d.weight",
                           "attn_rel_b.weight", "time_mix_"}) {
    if (Contains(name, kept)) return false;
  }
  return name != "position_embd.weight" && name != "token_types.weight";
}

GgmlType MixTensorType(const QuantFileType& ftype, const QuantMixModel& model,
                       const std::string& name, int64_t cols) {
  GgmlType t = ftype.base;
  if (IsFloat(t)) return t;
  const uint32_t f = ftype.id;
  const int layer = LayerOf(name);
  if (name == "output.weight" || (!model.has_output && name == "token_embd.weight")) {
    // The output matrix decides every logit: Q6_K (Q8_0 stays), Q8_0 for odd widths.
    if (cols % BlockOf(t) != 0) {
      t = GgmlType::kQ8_0;
    } else if (t != GgmlType::kQ8_0) {
      t = GgmlType::kQ6_K;
    }
  } else if (name == "token_embd.weight") {
    // Read a row at a time, never multiplied: the base type (for the file types here).
  } else if (Contains(name, "attn_v.weight")) {
    t = model.n_expert == 8 ? GgmlType::kQ8_0 : AttnVType(f, model, layer, t);
  } else if (Contains(name, "attn_k.weight")) {
    if (model.n_expert == 8) t = GgmlType::kQ8_0;
  } else if (Contains(name, "ffn_down")) {
    t = FfnDownType(f, model, layer, t);
  } else if (Contains(name, "attn_output.weight")) {
    t = AttnOutputType(f, model, t);
  } else if (Contains(name, "attn_qkv.weight")) {
    t = AttnQkvType(f, t);
  }
  return FallbackForWidth(t, cols);
}

GgmlType FallbackForWidth(GgmlType type, int64_t cols) {
  if (cols % BlockOf(type) == 0) return type;
  // The 32-element type each 256-element one falls back to (others: F16).
  static constexpr std::pair<GgmlType, GgmlType> kFallbacks[] = {
      {GgmlType::kQ2_K, GgmlType::kIQ4_NL},   {GgmlType::kQ3_K, GgmlType::kIQ4_NL},
      {GgmlType::kIQ4_XS, GgmlType::kIQ4_NL}, {GgmlType::kQ4_K, GgmlType::kQ5_0},
      {GgmlType::kQ5_K, GgmlType::kQ5_1},     {GgmlType::kQ6_K, GgmlType::kQ8_0}};
  GgmlType t = GgmlType::kF16;
  for (const auto& [from, to] : kFallbacks) {
    if (from == type) t = to;
  }
  return cols % BlockOf(t) == 0 ? t : GgmlType::kF16;
}

}  // namespace promptcache
