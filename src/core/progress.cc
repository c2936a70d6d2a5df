#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace promptcache {

ProgressBar::ProgressBar(std::string label, int64_t total)
    : label_(std::move(label)),
      total_(total > 0 ? total : 1),
      enabled_(isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() { Finish(); }

void ProgressBar::Update(int64_t done) {
  if (!enabled_) return;
  const int permille = static_cast<int>(1000 * (done < total_ ? done : total_) / total_);
  if (permille == last_permille_) return;
  // Skip drawing for work that finishes quickly; a bar that flashes helps nobody.
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (!drawn_ && secs < 0.3 && permille < 1000) return;
  last_permille_ = permille;
  constexpr int kWidth = 30;
  const int filled = permille * kWidth / 1000;
  std::string bar(filled, '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "\r%s [%s] %5.1f%% %6.1fs", label_.c_str(), bar.c_str(), permille / 10.0,
               secs);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::Finish() {
  if (drawn_) {
    Update(total_);
    std::fputc('\n', stderr);
    drawn_ = false;
    enabled_ = false;
  }
}

}  // namespace promptcache
