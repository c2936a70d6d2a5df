// The models of the engine's modular and segment tests (modular_test_util.h, segment_test.cc):
// the real stories260K, or one of synth's tiny presets with stories260K's vocabulary (e.g.
// "gemma3": 24-token sliding windows), written once per test process and removed at its exit;
// and the short documents their retrieval-style prompts carry as segments.
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

// Short stories in stories260K's style, each a segment of the retrieval-style prompts of
// segment_test.cc and fidelity_sample_test.cc.
inline const char* const kStoryDocs[] = {
    "\nLily was a happy girl who lived near the park. She had a red ball and a little dog named "
    "Max. Every morning, Lily and Max ran to the park to play.",
    "\nTim was a small boy with a big smile. He loved trucks and cars. He had a blue truck that "
    "he took everywhere he went.",
    "\nSue was a shy girl who liked to read books. She had a book about a brave bird. She sat "
    "under a tall tree in the park and read her book every day.",
    "\nIn the park, there was a big slide and a swing. The kids took turns on the slide. They "
    "laughed and had fun together.",
    "\nNear the park, there was a small lake with ducks. The ducks swam in the water and said "
    "quack. The kids gave them bread.",
};

}  // namespace promptcache
