#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/targets.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Highway headers below must follow foreach_target.h.
#include "hwy/highway.h"
#include "ops/targets.h"

HWY_BEFORE_NAMESPACE();
namespace promptcache {
namespace HWY_NAMESPACE {
int64_t ThisTarget() { return HWY_TARGET; }
}  // namespace HWY_NAMESPACE
}  // namespace promptcache
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace promptcache {

HWY_EXPORT(ThisTarget);

std::vector<int64_t> OpsTargets() { return hwy::SupportedAndGeneratedTargets(); }

std::string OpsTargetName(int64_t target) { return hwy::TargetName(target); }

std::string OpsActiveTargetName() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(ThisTarget)()); }

ScopedOpsTarget::ScopedOpsTarget(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
ScopedOpsTarget::~ScopedOpsTarget() { hwy::SetSupportedTargetsForTest(0); }

}  // namespace promptcache
#endif  // HWY_ONCE
