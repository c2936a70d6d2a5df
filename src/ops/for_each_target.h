// Test helper for the ops kernels: runs a test body once per Highway target compiled in and
// supported by this CPU, with run-time dispatch forced to it, so every kernel's every variant is
// checked and not only the best one.
#pragma once

#include <gtest/gtest.h>

#include "ops/targets.h"

namespace promptcache {

template <typename F>
void ForEachTarget(F body) {
  const auto targets = OpsTargets();
  ASSERT_FALSE(targets.empty());
  for (int64_t t : targets) {
    ScopedOpsTarget scoped(t);
    SCOPED_TRACE(OpsTargetName(t));
    ASSERT_EQ(OpsActiveTargetName(), OpsTargetName(t));
    body();
  }
}

}  // namespace promptcache
