// The models of the engine's modular and segment tests (modular_test_util.h, segment_test.cc):
// the real stories260K, or one of synth's tiny presets with stories260K's vocabulary (e.g.
// "gemma3": 24-token sliding windows), written once per test process and removed at its exit.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/check.h"
#include "core/temp_files.h"
#include "model/synth.h"

namespace promptcache {

inline const std::string kStories = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";

// The path of model `name`: "stories" (stories260K), else synth's preset "tiny-<name>".
inline std::string ModelPath(const std::string& name) {
  if (name == "stories") return kStories;
  const std::filesystem::path p =
      RemoveAtExit((std::filesystem::temp_directory_path() /
                    ("pc_test_model_" + std::to_string(getpid()) + "_" + name + ".gguf"))
                       .string());
  if (!std::filesystem::exists(p)) {
    SynthOptions o;
    o.preset = "tiny-" + name;
    o.vocab_path = kStories;
    o.type = GgmlType::kQ8_0;
    o.out_path = p.string();
    PC_CHECK(Synthesize(o).ok());
  }
  return p.string();
}

}  // namespace promptcache
