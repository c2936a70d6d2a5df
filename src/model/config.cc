#include "model/config.h"

#include <algorithm>
#include <cmath>

#include "ops/vec.h"

namespace promptcache {
namespace {

constexpr double kPi = 3.14159265358979323846;

Status ReadPositiveInt(const GgufFile& f, const std::string& key, int* out) {
  Result<int64_t> v = f.GetInt(key);
  if (!v.ok()) return v.status();
  if (*v <= 0 || *v > (int64_t(1) << 30)) {
    return InvalidArgument(key + " = " + std::to_string(*v) + " is out of range");
  }
  *out = static_cast<int>(*v);
  return Status::Ok();
}

// Llama 3.1+ frequency scaling: long wavelengths are slowed by `factor`, short ones kept, and
// the band between is interpolated smoothly.
void ApplyLlama3Scaling(std::vector<float>& inv_freq, double factor, double low_freq_factor,
                        double high_freq_factor, double original_ctx) {
  const double low_wavelen = original_ctx / low_freq_factor;
  const double high_wavelen = original_ctx / high_freq_factor;
  for (float& f : inv_freq) {
    const double wavelen = 2 * kPi / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f = static_cast<float>(f / factor);
    } else {
      const double smooth =
          (original_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f = static_cast<float>((1 - smooth) * f / factor + smooth * f);
    }
  }
}

// YaRN (as llama.cpp's rotation computes it, with its default ramp ends beta_fast = 32 and
// beta_slow = 1 rotations over the original context): pairs that turn more than 32 times over
// the original context keep their frequency, those that turn less than once are slowed by
// `factor`, and a linear ramp over the pair index blends between; the rotated vectors are scaled
// by attn_factor * (1 + 0.1 ln(factor)).
void ApplyYarn(ModelConfig* c, double factor, double original_ctx, double attn_factor) {
  const double dims = c->head_dim;
  auto corr_dim = [&](double rotations) {
    return dims * std::log(original_ctx / (rotations * 2 * kPi)) / (2 * std::log(c->rope_base));
  };
  const double low = std::max(0.0, std::floor(corr_dim(32)));
  const double high = std::min(dims - 1, std::ceil(corr_dim(1)));
  for (size_t i = 0; i < c->inv_freq.size(); ++i) {
    const double y = (static_cast<double>(i) - low) / std::max(0.001, high - low);
    const double extrapolate = 1 - std::clamp(y, 0.0, 1.0);
    c->inv_freq[i] =
        static_cast<float>(c->inv_freq[i] * ((1 - extrapolate) / factor + extrapolate));
  }
  c->rope_mscale = static_cast<float>(attn_factor * (1 + 0.1 * std::log(factor)));
}

Status ReadRope(const GgufFile& f, const std::string& a, ModelConfig* c) {
  PC_ASSIGN_OR_RETURN(double base, f.GetFloatOr(a + ".rope.freq_base", 10000.0));
  if (!(base > 1.0)) return InvalidArgument(a + ".rope.freq_base must be > 1");
  c->rope_base = static_cast<float>(base);
  PC_ASSIGN_OR_RETURN(int64_t n_rot, f.GetIntOr(a + ".rope.dimension_count", c->head_dim));
  if (n_rot != c->head_dim) {
    return Unimplemented(a + ".rope.dimension_count = " + std::to_string(n_rot) +
                         " (partial rotary embedding) is not supported");
  }
  const int half = c->head_dim / 2;
  c->inv_freq.resize(half);
  for (int i = 0; i < half; ++i) {
    c->inv_freq[i] = static_cast<float>(std::pow(base, -2.0 * i / c->head_dim));
  }
  // Real Llama-3.x files carry their scaling as per-pair divisors in a tensor.
  if (const GgufTensorInfo* t = f.FindTensor("rope_freqs.weight")) {
    if (t->type != GgmlType::kF32 || t->elements() != half) {
      return InvalidArgument("rope_freqs.weight must be F32 with " + std::to_string(half) +
                             " elements");
    }
    const float* factors = reinterpret_cast<const float*>(t->data);
    for (int i = 0; i < half; ++i) {
      if (!(factors[i] > 0)) return InvalidArgument("rope_freqs.weight has a factor <= 0");
      c->inv_freq[i] /= factors[i];
    }
    c->rope_scaling = "llama3";
    return Status::Ok();
  }
  const GgufValue* type = f.Find(a + ".rope.scaling.type");
  if (type == nullptr) return Status::Ok();
  std::string kind;
  if (!type->AsString(&kind)) return InvalidArgument(a + ".rope.scaling.type must be a string");
  if (kind == "none") return Status::Ok();
  PC_ASSIGN_OR_RETURN(double factor, f.GetFloatOr(a + ".rope.scaling.factor", 1.0));
  if (!(factor >= 1.0)) return InvalidArgument(a + ".rope.scaling.factor must be >= 1");
  if (kind == "linear") {
    for (float& x : c->inv_freq) x = static_cast<float>(x / factor);
    if (f.Find(a + ".rope.scaling.original_context_length")) {
      PC_ASSIGN_OR_RETURN(double orig,
                          f.GetFloatOr(a + ".rope.scaling.original_context_length", 0));
      c->rope_scaled_context = static_cast<int>(std::min(orig * factor, 1e9));
    }
  } else if (kind == "llama3") {
    PC_ASSIGN_OR_RETURN(double low, f.GetFloatOr(a + ".rope.scaling.low_freq_factor", 1.0));
    PC_ASSIGN_OR_RETURN(double high, f.GetFloatOr(a + ".rope.scaling.high_freq_factor", 4.0));
    PC_ASSIGN_OR_RETURN(double orig,
                        f.GetFloatOr(a + ".rope.scaling.original_context_length", 8192));
    if (!(high > low) || !(orig > 0)) return InvalidArgument("inconsistent llama3 rope scaling");
    ApplyLlama3Scaling(c->inv_freq, factor, low, high, orig);
  } else if (kind == "yarn") {
    PC_ASSIGN_OR_RETURN(
        double orig, f.GetFloatOr(a + ".rope.scaling.original_context_length", c->context_length));
    PC_ASSIGN_OR_RETURN(double attn_factor, f.GetFloatOr(a + ".rope.scaling.attn_factor", 1.0));
    if (!(orig >= 1) || !(attn_factor > 0 && attn_factor < 100)) {
      return InvalidArgument(a +
                             ": yarn rope scaling needs original_context_length >= 1 and "
                             "attn_factor in (0, 100)");
    }
    ApplyYarn(c, factor, orig, attn_factor);
    c->rope_scaled_context = static_cast<int>(std::min(orig * factor, 1e9));
  } else {
    return Unimplemented("rope scaling type '" + kind + "' is not supported");
  }
  c->rope_scaling = kind;
  return Status::Ok();
}

}  // namespace

Status CheckContext(const ModelConfig& c, int context, bool allow_long) {
  if (allow_long || c.MaxContext() <= 0 || context <= c.MaxContext()) return Status::Ok();
  return InvalidArgument("context " + std::to_string(context) + " is more than the " +
                         std::to_string(c.MaxContext()) +
                         " tokens the model was trained for (its RoPE scaling does not extend "
                         "it); --allow-long-context uses it anyway");
}

void ApplyRope(const ModelConfig& c, int layer, float* x, int n_heads, float pos) {
  const float* inv_freq = c.InvFreq(layer).data();
  if (c.rope_halves) {
    RopeHalves(x, n_heads, c.head_dim, pos, inv_freq);
  } else {
    Rope(x, n_heads, c.head_dim, pos, inv_freq);
  }
}

bool ModelConfig::UseContext(int context) {
  const bool want_long = !inv_freq_long.empty() && context > rope_original_context;
  if (want_long == rope_long) return false;
  inv_freq.swap(inv_freq_long);
  rope_long = want_long;
  return true;
}

Result<ModelConfig> ReadModelConfig(const GgufFile& f) {
  ModelConfig c;
  PC_ASSIGN_OR_RETURN(c.architecture, f.GetString("general.architecture"));
  if (!KnownArchitecture(c.architecture)) {
    return Unimplemented("unsupported architecture '" + c.architecture + "' (promptcache runs " +
                         SupportedArchitectures() + ")");
  }
  const std::string& a = c.architecture;
  if (Result<std::string> name = f.GetString("general.name"); name.ok()) c.name = *name;
  PC_RETURN_IF_ERROR(ReadPositiveInt(f, a + ".embedding_length", &c.n_embd));
  PC_RETURN_IF_ERROR(ReadPositiveInt(f, a + ".block_count", &c.n_layers));
  PC_RETURN_IF_ERROR(ReadPositiveInt(f, a + ".feed_forward_length", &c.n_ff));
  PC_RETURN_IF_ERROR(ReadPositiveInt(f, a + ".attention.head_count", &c.n_heads));
  c.n_kv_heads = c.n_heads;
  if (f.Find(a + ".attention.head_count_kv")) {
    PC_RETURN_IF_ERROR(ReadPositiveInt(f, a + ".attention.head_count_kv", &c.n_kv_heads));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return InvalidArgument(a + ".attention.head_count_kv = " + std::to_string(c.n_kv_heads) +
                           " does not divide " + a +
                           ".attention.head_count = " + std::to_string(c.n_heads));
  }
  c.head_dim = c.n_embd / c.n_heads;
  if (f.Find(a + ".attention.key_length")) {
    PC_RETURN_IF_ERROR(ReadPositiveInt(f, a + ".attention.key_length", &c.head_dim));
  }
  if (c.head_dim % 2 != 0) return InvalidArgument("head dimension must be even");
  c.context_length = 2048;
  if (f.Find(a + ".context_length")) {
    PC_RETURN_IF_ERROR(ReadPositiveInt(f, a + ".context_length", &c.context_length));
  }
  PC_ASSIGN_OR_RETURN(double eps, f.GetFloatOr(a + ".attention.layer_norm_rms_epsilon", 1e-5));
  if (!(eps > 0 && eps < 1)) return InvalidArgument("layer_norm_rms_epsilon out of range");
  c.rms_eps = static_cast<float>(eps);
  PC_RETURN_IF_ERROR(ReadRope(f, a, &c));
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  PC_RETURN_IF_ERROR(ReadArchitecture(f, &c));
  return c;
}

}  // namespace promptcache
