// A progress bar on stderr for work that can take seconds (loading, long prefill, synth,
// encoding modules). Draws only when stderr is a terminal, so logs and CI output stay clean.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace promptcache {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total);
  ~ProgressBar();  // finishes the line if anything was drawn
  void Update(int64_t done);
  void Finish();

 private:
  std::string label_;
  int64_t total_;
  bool enabled_;
  bool drawn_ = false;
  int last_permille_ = -1;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace promptcache
