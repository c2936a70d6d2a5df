// Helpers shared by the sampler's test files.
#pragma once

#include <cmath>
#include <vector>

namespace promptcache {

// Probabilities as logits (log p): the distribution at temperature 1 is `probs` itself.
inline std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

}  // namespace promptcache
