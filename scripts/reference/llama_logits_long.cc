// Reference logits at long positions from llama.cpp, for src/model/testdata (llama3-tied,
// architectures, q8_0): not part of the build; compiled against a llama.cpp peer built outside
// the project (see those folders' READMEs). Evaluates the ids in batches of 512 (llama.cpp's KV
// cache carries the context between them) and writes the logits of the last KEEP positions,
// n_vocab little-endian float32 each.
// usage: llama_logits_long [--ctx N] [--kv-f32] MODEL.gguf OUT.f32 KEEP ID...
//   --ctx N    context size (default: the number of ids + 16; LongRoPE picks its factors by it)
//   --kv-f32   keep K and V in f32 instead of f16, so attention is computed in f32 throughout
//              (without flash attention)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  int n_ctx = 0;
  bool kv_f32 = false;
  while (argc > 1 && argv[1][0] == '-') {
    if (std::strcmp(argv[1], "--ctx") == 0 && argc > 2) {
      n_ctx = std::atoi(argv[2]);
      argv += 2;
      argc -= 2;
    } else if (std::strcmp(argv[1], "--kv-f32") == 0) {
      kv_f32 = true;
      ++argv;
      --argc;
    } else {
      break;
    }
  }
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: llama_logits_long [--ctx N] [--kv-f32] MODEL OUT.f32 KEEP ID...\n");
    return 2;
  }
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == nullptr) return 1;
  const int keep = std::atoi(argv[3]);
  std::vector<llama_token> ids;
  for (int i = 4; i < argc; ++i) ids.push_back(std::atoi(argv[i]));
  const int n = static_cast<int>(ids.size());
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n_ctx > 0 ? n_ctx : n + 16;
  if (kv_f32) {
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn = false;  // on by default in ik_llama.cpp, whose flash attention needs f16 K/V
  }
  cp.n_batch = cp.n_ubatch = 512;
  cp.n_threads = cp.n_threads_batch = 2;
  llama_context* ctx = llama_init_from_model(model, cp);
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  FILE* f = std::fopen(argv[2], "wb");
  for (int s = 0; s < n; s += 512) {
    const int e = s + 512 < n ? s + 512 : n;
    llama_batch b = llama_batch_init(e - s, 0, 1);
    for (int i = s; i < e; ++i) {
      b.token[i - s] = ids[i];
      b.pos[i - s] = i;
      b.n_seq_id[i - s] = 1;
      b.seq_id[i - s][0] = 0;
      b.logits[i - s] = i >= n - keep;
    }
    b.n_tokens = e - s;
    if (llama_decode(ctx, b) != 0) return 1;
    for (int i = std::max(s, n - keep); i < e; ++i) {
      std::fwrite(llama_get_logits_ith(ctx, i - s), sizeof(float), n_vocab, f);
    }
    llama_batch_free(b);
  }
  std::fclose(f);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
