#include "model/model.h"

#include <algorithm>

#include "core/hash.h"
#include "ops/quant.h"

namespace promptcache {
namespace {

std::string DimsString(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

void HashValue(const GgufValue& v, Hasher128& h) {
  h.UpdatePod(static_cast<uint32_t>(v.type));
  if (v.is_array()) {
    h.UpdatePod(static_cast<uint64_t>(v.array.size()));
    for (const GgufValue& e : v.array) HashValue(e, h);
    return;
  }
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          h.Update(std::string_view(x));
        } else {
          h.UpdatePod(x);
        }
      },
      v.scalar);
}

// Metadata and tensor layout, plus the first and last 4 KiB of every tensor's data: cheap to
// read, and enough to tell apart two files of one shape with different weights.
std::string Fingerprint(const GgufFile& f) {
  Hasher128 h;
  h.UpdatePod(f.version());
  for (const auto& [key, value] : f.metadata()) {
    h.Update(std::string_view(key));
    HashValue(value, h);
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    h.Update(std::string_view(t.name));
    for (int64_t d : t.dims) h.UpdatePod(d);
    h.UpdatePod(static_cast<uint32_t>(t.type));
    h.UpdatePod(t.offset);
    const size_t n = std::min<size_t>(4096, t.nbytes);
    h.Update(t.data, n);
    h.Update(t.data + t.nbytes - n, n);
  }
  return h.HexDigest();
}

// "F32, F16, ..." for the error that names an unsupported weight type.
std::string SupportedWeightTypes() {
  std::string names;
  for (uint32_t id = 0; id < 64; ++id) {
    const auto type = static_cast<GgmlType>(id);
    if (MatMulSupports(type)) names += (names.empty() ? "" : ", ") + GgmlTypeName(type);
  }
  return names;
}

class TensorBinder {
 public:
  TensorBinder(const GgufFile& f) : f_(f) {}

  Status Matrix(const std::string& name, int64_t rows, int64_t cols, WeightMatrix* out) {
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (t == nullptr) return NotFound("missing tensor '" + name + "'");
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
      return InvalidArgument("tensor '" + name + "' has shape " + DimsString(t->dims) +
                             ", expected " + DimsString({cols, rows}));
    }
    return Bind(*t, name, rows, cols, out);
  }

  // Rows [first, first + rows) of a matrix of `total` rows, as a matrix of their own.
  Status MatrixRows(const std::string& name, int64_t total, int64_t first, int64_t rows,
                    int64_t cols, WeightMatrix* out) {
    PC_RETURN_IF_ERROR(Matrix(name, total, cols, out));
    out->data += first * out->row_bytes;
    out->rows = rows;
    return Status::Ok();
  }

  // A 3-D tensor of n_expert matrices [rows x cols] (ne0 = cols, ne1 = rows, ne2 = experts),
  // each a matrix of its own to the kernels.
  Status Experts(const std::string& name, int64_t n_expert, int64_t rows, int64_t cols,
                 std::vector<WeightMatrix>* out) {
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (t == nullptr) return NotFound("missing tensor '" + name + "'");
    if (t->dims.size() != 3 || t->dims[0] != cols || t->dims[1] != rows || t->dims[2] != n_expert) {
      return InvalidArgument("tensor '" + name + "' has shape " + DimsString(t->dims) +
                             ", expected " + DimsString({cols, rows, n_expert}));
    }
    WeightMatrix first;
    PC_RETURN_IF_ERROR(Bind(*t, name, rows, cols, &first));
    out->assign(n_expert, first);
    for (int64_t e = 0; e < n_expert; ++e) (*out)[e].data += e * rows * first.row_bytes;
    return Status::Ok();
  }

  // A matrix of one row the file may leave out (then out->rows is 0), stored as a vector of
  // `cols` or as a [cols, 1] matrix.
  Status OptionalRow(const std::string& name, int64_t cols, WeightMatrix* out) {
    *out = {};
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (t == nullptr) return Status::Ok();
    if (t->dims.size() == 1 && t->dims[0] == cols) return Bind(*t, name, 1, cols, out);
    if (t->dims.size() != 2) {
      return InvalidArgument("tensor '" + name + "' has shape " + DimsString(t->dims) +
                             ", expected [" + std::to_string(cols) + "]");
    }
    return Matrix(name, 1, cols, out);
  }

  // A vector the file may leave out: `out` stays empty then.
  Status OptionalVector(const std::string& name, int64_t n, std::vector<float>* out) {
    out->clear();
    return f_.FindTensor(name) == nullptr ? Status::Ok() : Vector(name, n, out);
  }

  // A 2-D tensor of `rows` vectors of `cols` (ne0 = cols) the file may leave out, as floats,
  // row-major: per-expert biases.
  Status OptionalRows(const std::string& name, int64_t rows, int64_t cols,
                      std::vector<float>* out) {
    out->clear();
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (t == nullptr) return Status::Ok();
    if (t->dims.size() != 2 || t->dims[0] != cols || t->dims[1] != rows) {
      return InvalidArgument("tensor '" + name + "' has shape " + DimsString(t->dims) +
                             ", expected " + DimsString({cols, rows}));
    }
    if (!RowConversionSupports(t->type)) {
      return Unimplemented("tensor '" + name + "' has unsupported type " + GgmlTypeName(t->type));
    }
    out->resize(rows * cols);
    const size_t row_bytes = RowBytes(t->type, cols);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(t->type, t->data + r * row_bytes, cols, out->data() + r * cols);
    }
    return Status::Ok();
  }

  Status Vector(const std::string& name, int64_t n, std::vector<float>* out) {
    const GgufTensorInfo* t = f_.FindTensor(name);
    if (t == nullptr) return NotFound("missing tensor '" + name + "'");
    if (t->dims.size() != 1 || t->dims[0] != n) {
      return InvalidArgument("tensor '" + name + "' has shape " + DimsString(t->dims) +
                             ", expected [" + std::to_string(n) + "]");
    }
    if (!RowConversionSupports(t->type)) {
      return Unimplemented("tensor '" + name + "' has unsupported type " + GgmlTypeName(t->type));
    }
    out->resize(n);
    DequantizeRow(t->type, t->data, n, out->data());
    return Status::Ok();
  }

 private:
  // `t`, of a shape already checked, as a matrix [rows x cols] the kernels multiply by.
  static Status Bind(const GgufTensorInfo& t, const std::string& name, int64_t rows, int64_t cols,
                     WeightMatrix* out) {
    if (!MatMulSupports(t.type)) {
      return Unimplemented("tensor '" + name + "' has type " + GgmlTypeName(t.type) +
                           ", which is not supported (" + SupportedWeightTypes() + " are)");
    }
    *out = {t.type, t.data, rows, cols, RowBytes(t.type, cols)};
    return Status::Ok();
  }

  const GgufFile& f_;
};

// A mixture-of-experts layer's router and experts (p: "blk.N."), with their biases where the
// file has them (gpt-oss).
Status BindExperts(TensorBinder& b, const ModelConfig& c, const std::string& p, LayerWeights* l) {
  PC_RETURN_IF_ERROR(b.Matrix(p + "ffn_gate_inp.weight", c.n_expert, c.n_embd, &l->router));
  PC_RETURN_IF_ERROR(b.OptionalVector(p + "ffn_gate_inp.bias", c.n_expert, &l->router_b));
  PC_RETURN_IF_ERROR(
      b.OptionalRows(p + "ffn_gate_exps.bias", c.n_expert, c.n_ff_exp, &l->gate_exps_b));
  PC_RETURN_IF_ERROR(b.OptionalRows(p + "ffn_up_exps.bias", c.n_expert, c.n_ff_exp, &l->up_exps_b));
  PC_RETURN_IF_ERROR(
      b.OptionalRows(p + "ffn_down_exps.bias", c.n_expert, c.n_embd, &l->down_exps_b));
  PC_RETURN_IF_ERROR(
      b.Experts(p + "ffn_gate_exps.weight", c.n_expert, c.n_ff_exp, c.n_embd, &l->gate_exps));
  PC_RETURN_IF_ERROR(
      b.Experts(p + "ffn_up_exps.weight", c.n_expert, c.n_ff_exp, c.n_embd, &l->up_exps));
  PC_RETURN_IF_ERROR(
      b.Experts(p + "ffn_down_exps.weight", c.n_expert, c.n_embd, c.n_ff_exp, &l->down_exps));
  if (c.n_ff_shexp == 0) return Status::Ok();
  // The shared expert, and its gate where the file has one: a single row, which llama.cpp's
  // converter squeezes to a vector [n_embd] (F32); the unsqueezed [n_embd, 1] is taken too.
  PC_RETURN_IF_ERROR(b.Matrix(p + "ffn_gate_shexp.weight", c.n_ff_shexp, c.n_embd, &l->gate_shexp));
  PC_RETURN_IF_ERROR(b.Matrix(p + "ffn_up_shexp.weight", c.n_ff_shexp, c.n_embd, &l->up_shexp));
  PC_RETURN_IF_ERROR(b.Matrix(p + "ffn_down_shexp.weight", c.n_embd, c.n_ff_shexp, &l->down_shexp));
  return b.OptionalRow(p + "ffn_gate_inp_shexp.weight", c.n_embd, &l->gate_inp_shexp);
}

}  // namespace

Result<std::unique_ptr<Model>> Model::Load(const std::string& path, bool pack) {
  std::unique_ptr<Model> m(new Model());
  PC_ASSIGN_OR_RETURN(m->file_, GgufFile::Open(path));
  Result<ModelConfig> config = ReadModelConfig(*m->file_);
  if (!config.ok()) return config.status().WithContext(path);
  m->config_ = std::move(config).value();
  Status st = m->BindWeights();
  if (!st.ok()) return st.WithContext(path);
  if (pack) m->PackWeights();
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromGguf(*m->file_);
  if (!tok.ok()) return tok.status().WithContext(path);
  m->tokenizer_ = std::move(tok).value();
  if (m->tokenizer_->vocab_size() != m->config_.n_vocab) {
    return InvalidArgument(
        path + ": the tokenizer has " + std::to_string(m->tokenizer_->vocab_size()) +
        " tokens but token_embd.weight has " + std::to_string(m->config_.n_vocab) + " rows");
  }
  if (Result<std::string> t = m->file_->GetString("tokenizer.chat_template"); t.ok()) {
    m->chat_template_ = *t;
  }
  m->fingerprint_ = Fingerprint(*m->file_);
  return m;
}

Status Model::BindWeights() {
  const ModelConfig& c = config_;
  const GgufTensorInfo* embd = file_->FindTensor("token_embd.weight");
  if (embd == nullptr) return NotFound("missing tensor 'token_embd.weight'");
  if (embd->dims.size() != 2 || embd->dims[0] != c.n_embd || embd->dims[1] <= 0 ||
      embd->dims[1] > (1 << 24)) {
    return InvalidArgument("tensor 'token_embd.weight' has shape " + DimsString(embd->dims));
  }
  config_.n_vocab = static_cast<int>(embd->dims[1]);
  TensorBinder b(*file_);
  PC_RETURN_IF_ERROR(b.Matrix("token_embd.weight", c.n_vocab, c.n_embd, &token_embd_));
  if (!RowConversionSupports(token_embd_.type)) {
    return Unimplemented("token_embd.weight type " + GgmlTypeName(token_embd_.type));
  }
  if (file_->FindTensor("output.weight")) {
    PC_RETURN_IF_ERROR(b.Matrix("output.weight", c.n_vocab, c.n_embd, &output_));
  } else {
    output_ = token_embd_;  // tied embeddings
  }
  PC_RETURN_IF_ERROR(b.Vector("output_norm.weight", c.n_embd, &output_norm_));
  layers_.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights& l = layers_[i];
    PC_RETURN_IF_ERROR(b.Vector(p + "attn_norm.weight", c.n_embd, &l.attn_norm));
    if (file_->FindTensor(p + "attn_qkv.weight")) {
      fused_qkv_ = true;
      const int64_t total = c.q_dim() + 2 * c.kv_dim();
      const std::string name = p + "attn_qkv.weight";
      PC_RETURN_IF_ERROR(b.MatrixRows(name, total, 0, c.q_dim(), c.n_embd, &l.wq));
      PC_RETURN_IF_ERROR(b.MatrixRows(name, total, c.q_dim(), c.kv_dim(), c.n_embd, &l.wk));
      PC_RETURN_IF_ERROR(
          b.MatrixRows(name, total, c.q_dim() + c.kv_dim(), c.kv_dim(), c.n_embd, &l.wv));
    } else {
      PC_RETURN_IF_ERROR(b.Matrix(p + "attn_q.weight", c.q_dim(), c.n_embd, &l.wq));
      PC_RETURN_IF_ERROR(b.Matrix(p + "attn_k.weight", c.kv_dim(), c.n_embd, &l.wk));
      PC_RETURN_IF_ERROR(b.Matrix(p + "attn_v.weight", c.kv_dim(), c.n_embd, &l.wv));
    }
    PC_RETURN_IF_ERROR(b.Matrix(p + "attn_output.weight", c.n_embd, c.q_dim(), &l.wo));
    PC_RETURN_IF_ERROR(b.OptionalVector(p + "attn_q.bias", c.q_dim(), &l.bq));
    PC_RETURN_IF_ERROR(b.OptionalVector(p + "attn_k.bias", c.kv_dim(), &l.bk));
    PC_RETURN_IF_ERROR(b.OptionalVector(p + "attn_v.bias", c.kv_dim(), &l.bv));
    PC_RETURN_IF_ERROR(b.OptionalVector(p + "attn_q_norm.weight", c.head_dim, &l.q_norm));
    PC_RETURN_IF_ERROR(b.OptionalVector(p + "attn_k_norm.weight", c.head_dim, &l.k_norm));
    PC_RETURN_IF_ERROR(b.OptionalVector(p + "attn_output.bias", c.n_embd, &l.bo));
    PC_RETURN_IF_ERROR(b.OptionalVector(p + "attn_sinks.weight", c.n_heads, &l.attn_sinks));
    if (c.ffn_norm_is_post_attention_norm) {
      PC_RETURN_IF_ERROR(b.Vector(p + "post_attention_norm.weight", c.n_embd, &l.ffn_norm));
    } else {
      PC_RETURN_IF_ERROR(
          b.OptionalVector(p + "post_attention_norm.weight", c.n_embd, &l.attn_post_norm));
      PC_RETURN_IF_ERROR(b.Vector(p + "ffn_norm.weight", c.n_embd, &l.ffn_norm));
    }
    if (c.Moe()) {
      PC_RETURN_IF_ERROR(BindExperts(b, c, p, &l));
    } else if (file_->FindTensor(p + "ffn_gate.weight") == nullptr) {
      fused_gate_up_ = true;
      const std::string name = p + "ffn_up.weight";
      PC_RETURN_IF_ERROR(b.MatrixRows(name, 2 * c.n_ff, 0, c.n_ff, c.n_embd, &l.w_gate));
      PC_RETURN_IF_ERROR(b.MatrixRows(name, 2 * c.n_ff, c.n_ff, c.n_ff, c.n_embd, &l.w_up));
    } else {
      PC_RETURN_IF_ERROR(b.Matrix(p + "ffn_gate.weight", c.n_ff, c.n_embd, &l.w_gate));
      PC_RETURN_IF_ERROR(b.Matrix(p + "ffn_up.weight", c.n_ff, c.n_embd, &l.w_up));
    }
    if (!c.Moe()) {
      PC_RETURN_IF_ERROR(b.Matrix(p + "ffn_down.weight", c.n_embd, c.n_ff, &l.w_down));
    }
    PC_RETURN_IF_ERROR(b.OptionalVector(p + "post_ffw_norm.weight", c.n_embd, &l.ffn_post_norm));
  }
  return Status::Ok();
}

template <class W, class Self>
std::vector<std::pair<std::string, W*>> Model::MatricesOf(Self& m) {
  std::vector<std::pair<std::string, W*>> matrices;
  matrices.push_back(
      {m.file_->FindTensor("output.weight") ? "output.weight" : "token_embd.weight", &m.output_});
  for (int i = 0; i < m.config_.n_layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    auto& l = m.layers_[i];
    const char* qkv = m.fused_qkv_ ? "attn_qkv" : nullptr;
    const char* gate = m.fused_gate_up_ ? "ffn_up" : "ffn_gate";
    for (auto [w, name] : {std::pair{&l.wq, qkv ? qkv : "attn_q"},
                           {&l.wk, qkv ? qkv : "attn_k"},
                           {&l.wv, qkv ? qkv : "attn_v"},
                           {&l.wo, "attn_output"},
                           {&l.w_gate, gate},
                           {&l.w_up, "ffn_up"},
                           {&l.w_down, "ffn_down"}}) {
      if (l.moe() && w->rows == 0) continue;  // no dense FFN
      matrices.push_back({p + name + ".weight", w});
    }
    if (!l.moe()) continue;
    // Each expert a matrix of its own, under its 3-D tensor's name (one tensor's experts in a row).
    matrices.push_back({p + "ffn_gate_inp.weight", &l.router});
    for (auto [w, name] : {std::pair{&l.gate_shexp, "ffn_gate_shexp"},
                           {&l.up_shexp, "ffn_up_shexp"},
                           {&l.down_shexp, "ffn_down_shexp"},
                           {&l.gate_inp_shexp, "ffn_gate_inp_shexp"}}) {
      if (w->rows > 0) matrices.push_back({p + name + ".weight", w});
    }
    for (auto [exps, name] : {std::pair{&l.gate_exps, "ffn_gate_exps"},
                              {&l.up_exps, "ffn_up_exps"},
                              {&l.down_exps, "ffn_down_exps"}}) {
      for (auto& w : *exps) matrices.push_back({p + name + ".weight", &w});
    }
  }
  return matrices;
}

std::vector<std::pair<std::string, const WeightMatrix*>> Model::Matrices() const {
  return MatricesOf<const WeightMatrix>(*this);
}

void Model::PackWeights() {
  const std::vector<std::pair<std::string, WeightMatrix*>> matrices =
      MatricesOf<WeightMatrix>(*this);
  // One matrix at a time, its file pages released as soon as it is packed, so the peak stays near
  // the packed size. (A tied embedding's rows page back in for the lookups that need them.)
  ThreadPool pool(ThreadPool::DefaultThreads());
  for (size_t i = 0; i < matrices.size(); ++i) {
    auto& [name, w] = matrices[i];
    if (FindPackedFormat(w->type) == nullptr || w->rows == 0) continue;
    packed_.push_back(std::make_unique<PackedMatrix>(PackMatrix(*w, &pool)));
    w->packed = packed_.back().get();
    // An expert tensor's pages once its last expert is packed.
    if (i + 1 == matrices.size() || matrices[i + 1].first != name) {
      file_->ReleasePages(*file_->FindTensor(name));
    }
  }
}

void Model::UseContext(int context) {
  if (!config_.UseContext(context)) return;
  Hasher128 h;
  h.Update(std::string_view(fingerprint_));
  h.Update(std::string_view(config_.rope_long ? "longrope:long" : "longrope:short"));
  fingerprint_ = config_.rope_long ? h.HexDigest() : Fingerprint(*file_);
}

size_t Model::packed_bytes() const {
  size_t n = 0;
  for (const auto& p : packed_) n += p->bytes();
  return n;
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for (const GgufTensorInfo& t : file_->tensors()) n += t.nbytes;
  return n;
}

size_t Model::ScratchBytesPerToken() const {
  const ModelConfig& c = config_;
  // x, xn, attention output and the residual update [D each]; q and attn [q_dim]; k, v [kv_dim];
  // gate, up and the down projection's Q8_0-rounded input [n_ff]; int8 quants of the widest input;
  // the attention state of each query head.
  // Mixture-of-experts layers: the router's logits, and per choice its input, gate, up and
  // output rows (MoeScratch) and the int8 quants of the widest.
  const size_t k = c.n_expert_used;
  const size_t moe =
      c.Moe() ? sizeof(float) * (c.n_expert + k * (2 * size_t(c.n_embd) + 2 * size_t(c.n_ff_exp))) +
                    k * std::max(c.n_embd, c.n_ff_exp)
              : 0;
  // The shared expert's gate logit and output row.
  const size_t shared = c.n_ff_shexp > 0 ? sizeof(float) * (size_t(c.n_embd) + 1) : 0;
  // The dense FFN's rows, or the shared expert's (its gate and up in the same buffers).
  const size_t n_ff = c.Moe() ? c.n_ff_shexp : c.n_ff;
  return sizeof(float) *
             (4 * size_t(c.n_embd) + 2 * size_t(c.q_dim()) + 2 * size_t(c.kv_dim()) + 3 * n_ff) +
         std::max<size_t>(c.n_embd, n_ff) + sizeof(AttnState) * c.n_heads + moe + shared;
}

int Model::DefaultBatchSize(size_t budget) const {
  const size_t n = budget / ScratchBytesPerToken() / 32 * 32;
  return static_cast<int>(std::clamp<size_t>(n, 32, 512));
}

KvLayout Model::MakeKvLayout(KvType type, int block_size) const {
  KvLayout l;
  l.n_layers = config_.n_layers;
  l.n_kv_heads = config_.n_kv_heads;
  l.head_dim = config_.head_dim;
  l.type = type;
  l.block_size = block_size;
  if (config_.AnySliding()) {
    l.layer_sliding = config_.layer_sliding;
    l.sliding_window = config_.sliding_window;
  }
  return l;
}

}  // namespace promptcache
