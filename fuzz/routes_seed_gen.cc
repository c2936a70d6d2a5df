// Writes routes_fuzz's seeds into a folder: every built-in body of fuzz/routes_fuzz_bodies.h, one
// file each (named by route and index), so that mutations start from whole valid requests.
//   routes_seed_gen SEED_DIR
#include <cstdio>
#include <fstream>
#include <string>

#include "fuzz/routes_fuzz_bodies.h"

namespace {

template <size_t N>
bool Write(const std::string& dir, const char* route, const char* const (&bodies)[N]) {
  for (size_t i = 0; i < N; ++i) {
    const std::string path = dir + "/" + route + "_" + std::to_string(i);
    std::ofstream out(path, std::ios::binary);
    out << bodies[i];
    if (!out) {
      std::fprintf(stderr, "routes_seed_gen: cannot write %s\n", path.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: routes_seed_gen SEED_DIR\n");
    return 2;
  }
  using namespace promptcache::fuzzing::routes;  // NOLINT(build/namespaces)
  const std::string dir = argv[1];
  const bool ok = Write(dir, "responses", kResponsesBodies) &&
                  Write(dir, "ollama_chat", kOllamaChatBodies) &&
                  Write(dir, "ollama_generate", kOllamaGenerateBodies) &&
                  Write(dir, "embeddings", kEmbeddingsBodies) &&
                  Write(dir, "ollama_embed", kOllamaEmbedBodies) &&
                  Write(dir, "savings", kSavingsBodies) && Write(dir, "schema", kSchemaBodies);
  return ok ? 0 : 1;
}
