// Stubs for make_llama_cpp_samplers.cpp (README.md): what llama-sampling.cpp references but no
// reference case calls. Not built by the project.
#include <cstdlib>
#include "llama-vocab.h"
#include "llama-grammar.h"
#include "ggml.h"
#include "gguf.h"
extern "C" {
void ggml_abort(const char*, int, const char*, ...) { abort(); }
void ggml_log_set(ggml_log_callback, void*) {}
int64_t ggml_time_us(void) { return 0; }
const void* gguf_get_arr_data(const gguf_context*, int64_t) { abort(); }
size_t gguf_get_arr_n(const gguf_context*, int64_t) { abort(); }
const char* gguf_get_arr_str(const gguf_context*, int64_t, size_t) { abort(); }
enum gguf_type gguf_get_arr_type(const gguf_context*, int64_t) { abort(); }
enum gguf_type gguf_get_kv_type(const gguf_context*, int64_t) { abort(); }
const void* gguf_get_val_data(const gguf_context*, int64_t) { abort(); }
const char* gguf_get_val_str(const gguf_context*, int64_t) { abort(); }
float* llama_get_logits_ith(llama_context*, int32_t) { abort(); }
const llama_model* llama_get_model(const llama_context*) { abort(); }
const llama_vocab* llama_model_get_vocab(const llama_model*) { abort(); }
int32_t llama_vocab_n_tokens(const llama_vocab*) { abort(); }
}
void llama_grammar_accept_impl(llama_grammar&, llama_token) { abort(); }
void llama_grammar_apply_impl(const llama_grammar&, llama_token_data_array*) { abort(); }
llama_grammar* llama_grammar_clone_impl(const llama_grammar&) { abort(); }
void llama_grammar_free_impl(llama_grammar*) { abort(); }
llama_grammar* llama_grammar_init_impl(const llama_vocab*, const char*, const char*, bool,
                                       const char**, size_t, const llama_token*, size_t) { abort(); }
std::string llama_vocab::detokenize(const std::vector<llama_token>&, bool) const { abort(); }
bool llama_vocab::is_eog(llama_token) const { abort(); }
struct llama_vocab::impl {};
llama_vocab::llama_vocab() {}
uint32_t llama_vocab::n_tokens() const { abort(); }
llama_token llama_vocab::token_eot() const { abort(); }
int32_t llama_vocab::token_to_piece(llama_token, char*, int32_t, int32_t, bool) const { abort(); }
std::vector<llama_token> llama_vocab::tokenize(const std::string&, bool, bool) const { abort(); }
llama_vocab::~llama_vocab() {}
