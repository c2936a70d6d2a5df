// The Highway targets (instruction sets) the ops kernels were compiled for, so that tests and
// benchmarks can run every kernel on each one this CPU supports, not only the best.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace promptcache {

// Targets compiled into pc_ops that this CPU can run, best first (as HWY_* bits).
std::vector<int64_t> OpsTargets();
std::string OpsTargetName(int64_t target);
// The target the ops dispatch currently chooses.
std::string OpsActiveTargetName();

// While alive, run-time dispatch behaves as if the CPU supported only `target`.
class ScopedOpsTarget {
 public:
  explicit ScopedOpsTarget(int64_t target);
  ~ScopedOpsTarget();
  ScopedOpsTarget(const ScopedOpsTarget&) = delete;
  ScopedOpsTarget& operator=(const ScopedOpsTarget&) = delete;
};

}  // namespace promptcache
