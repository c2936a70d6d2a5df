// Which type each tensor of a model gets when a whole file is quantized: the file types users
// know from llama-quantize (Q4_K_M, Q3_K_S, ...) and the rules that make them mixes. A Q4_K_M
// file is mostly Q4_K, but its output matrix is Q6_K and so are attn_v and ffn_down in some
// layers; rows whose width the type's block does not divide fall back to a 32-element type.
// These are the conventions of llama.cpp's quantizer (its tensor-type rules for Llama-style
// tensor names, re-expressed here, with its cases for mixture-of-experts files), so that a file
// made here has the mix a user expects from that name. `promptcache quantize` applies them per
// tensor; `synth` uses the fallback and the file-type ids.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace promptcache {

// A file type: its name, its general.file_type id (llama.cpp's LLAMA_FTYPE_*) and the type of
// most of its matrices.
struct QuantFileType {
  const char* name;
  uint32_t id;
  GgmlType base;
};

// The file types `quantize` writes, by name (case-insensitive; Q3_K, Q4_K and Q5_K mean their _M
// mixes, as in llama-quantize). InvalidArgument naming the known ones otherwise.
Result<QuantFileType> ParseQuantFileType(const std::string& name);
// Their names, in the order help texts list them.
std::vector<std::string> QuantFileTypeNames();
// general.file_type of a file whose matrices are all `type` (the _M id for K-quants: what
// llama-quantize --pure writes); 0 (all F32) for types without one.
uint32_t FileTypeIdFor(GgmlType type);

// What the rules need to know about a model.
struct QuantMixModel {
  int n_layer = 0;
  int n_gqa = 1;           // query heads per KV head
  int n_attn_v = 0;        // attn_v (or fused attn_qkv) tensors
  bool has_output = true;  // false: token_embd.weight doubles as the output matrix
  bool is_70b = false;     // Llama-2/3 70B: attn_v gets more bits
  int n_expert = 0;        // {arch}.expert_count: 8 (Mixtral) changes attention's types
};
// Reads the above from a model file's metadata and tensor names.
QuantMixModel QuantMixModelFromGguf(const GgufFile& file);

// Whether a tensor is quantized at all: 2-D (or 3-D) weights, not norms, not the few small
// matrices llama.cpp keeps as they are (expert gates, position embeddings, ...). Dimensions are
// counted as ggml counts them, without trailing 1s: a [n_embd, 1] tensor (a converter may write
// Qwen2-MoE's shared-expert gate so) is a vector, and stays as it is.
bool IsQuantizableTensor(const std::string& name, std::span<const int64_t> dims);

// The type for matrix `name` with rows of `cols` values in a file of type `ftype`: the mix rules
// for quantized file types, then the fallback for the row width. Float file types (F32, F16,
// BF16) give their own type.
GgmlType MixTensorType(const QuantFileType& ftype, const QuantMixModel& model,
                       const std::string& name, int64_t cols);

// `type` if its block divides `cols`; otherwise llama.cpp's fallback (Q2_K, Q3_K, IQ4_XS ->
// IQ4_NL; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0), and F16 where no quantized type fits (where
// llama.cpp refuses the file).
GgmlType FallbackForWidth(GgmlType type, int64_t cols);

}  // namespace promptcache
