#include "core/profile.h"

#include <gtest/gtest.h>

#include <vector>

namespace promptcache {
namespace {

// Aggregates of hand-made job timings: what each column of the bench report is made of.
TEST(Profiler, AggregatesJobsPerOperationLayerAndThread) {
  Profiler p(3);
  p.BeginPass(4);
  p.Op("matmul x", OpKind::kMatMul, 0);
  // Published at 1000, joined at 2000. Thread 0 busy 1000..1900 (wake 0, join wait 100),
  // thread 1 busy 1100..2000 (wake 100, join 0), thread 2 took no task (absent 1000).
  const std::vector<int64_t> begin = {1000, 1100, 0}, finish = {1900, 2000, 0};
  const std::vector<int> tasks = {2, 1, 0};
  p.Job({1000, 2000, begin, finish, tasks, {}});
  p.Op("norm", OpKind::kNorm, 1);
  p.Op("matmul x", OpKind::kMatMul, 1);
  p.Job({1000, 2000, begin, finish, tasks, {}});
  p.EndPass();

  ASSERT_EQ(p.ops().size(), 2u);
  const Profiler::OpStats& mm = p.ops()[0];
  EXPECT_EQ(mm.name, "matmul x");
  EXPECT_EQ(mm.calls, 2);
  EXPECT_TRUE(mm.in_layers);
  EXPECT_EQ(mm.jobs, 2);
  EXPECT_EQ(mm.job_ns, 2000);
  EXPECT_EQ(mm.busy_ns, 2 * (900 + 900));
  EXPECT_EQ(mm.max_busy_ns, 2 * 900);
  EXPECT_EQ(mm.wake_ns, 2 * 100);
  EXPECT_EQ(mm.join_ns, 2 * 100);
  EXPECT_EQ(mm.absent_ns, 2 * 1000);
  EXPECT_EQ(p.ops()[1].jobs, 0);
  EXPECT_EQ(p.jobs(), 2);
  ASSERT_EQ(p.layer_jobs().size(), 2u);
  EXPECT_EQ(p.layer_jobs()[0], 1);
  EXPECT_EQ(p.layer_jobs()[1], 1);
  EXPECT_EQ(p.threads()[0].jobs, 2);
  EXPECT_EQ(p.threads()[0].join_ns, 200);
  EXPECT_EQ(p.threads()[1].wake_ns, 200);
  EXPECT_EQ(p.threads()[2].jobs, 0);
  EXPECT_EQ(p.threads()[2].absent_ns, 2000);
  EXPECT_EQ(p.passes(), 1);
  EXPECT_EQ(p.tokens(), 4);
  // Wall times are real clock readings: only their consistency can be checked.
  int64_t ops_ns = 0;
  for (const Profiler::OpStats& op : p.ops()) ops_ns += op.wall_ns;
  EXPECT_LE(ops_ns, p.wall_ns());
  EXPECT_EQ(p.layer_ns()[0] + p.layer_ns()[1], ops_ns);
}

// Bytes read go to the operation they were read in and to the thread that read them; bytes read
// by the calling thread outside any job are its own (thread 0's).
TEST(Profiler, CountsBytesPerOperationAndThread) {
  Profiler p(2);
  p.BeginPass(1);
  p.Op("matmul x", OpKind::kMatMul, 0);
  const std::vector<int64_t> begin = {0, 0}, finish = {10, 10}, bytes = {300, 500};
  const std::vector<int> tasks = {1, 1};
  p.Job({0, 10, begin, finish, tasks, bytes});
  p.Bytes(40);
  p.Op("attention", OpKind::kAttention, 0);
  p.Job({0, 10, begin, finish, tasks, bytes});
  p.Job({0, 10, begin, finish, tasks, {}});  // a job that reported none
  p.EndPass();
  ASSERT_EQ(p.ops().size(), 2u);
  EXPECT_EQ(p.ops()[0].bytes, 840);
  EXPECT_EQ(p.ops()[1].bytes, 800);
  EXPECT_EQ(p.threads()[0].bytes, 640);
  EXPECT_EQ(p.threads()[1].bytes, 1000);
  EXPECT_EQ(p.bytes(), 1640);
}

TEST(Profiler, OpsAreMatchedByName) {
  Profiler p(1);
  p.BeginPass(1);
  const char a[] = "same";
  const std::string b = "same";
  p.Op(a, OpKind::kOther, -1);
  p.Op(b.c_str(), OpKind::kOther, -1);
  p.EndPass();
  ASSERT_EQ(p.ops().size(), 1u);
  EXPECT_EQ(p.ops()[0].calls, 2);
  EXPECT_FALSE(p.ops()[0].in_layers);
}

}  // namespace
}  // namespace promptcache
