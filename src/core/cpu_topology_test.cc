#include "core/cpu_topology.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace promptcache {
namespace {

// A file system made of sample texts.
ReadTextFn Files(std::map<std::string, std::string> files) {
  return [files = std::move(files)](const std::string& path) -> std::optional<std::string> {
    const auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
}

// sysfs topology of `cores` cores per package with two hyperthreads each, numbered as Linux
// numbers them on x86 (the second hyperthreads after all the first ones).
std::map<std::string, std::string> Sysfs(int packages, int cores) {
  std::map<std::string, std::string> files;
  const int per_thread = packages * cores;
  for (int cpu = 0; cpu < 2 * per_thread; ++cpu) {
    const int first = cpu % per_thread;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    files[dir + "physical_package_id"] = std::to_string(first / cores) + "\n";
    // Core ids repeat in each package, and need not be contiguous.
    files[dir + "core_id"] = std::to_string((first % cores) * 4) + "\n";
  }
  return files;
}

std::vector<int> Range(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(CpuTopology, ParsesCpuLists) {
  EXPECT_EQ(ParseCpuList("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(ParseCpuList("5"), (std::vector<int>{5}));
  EXPECT_EQ(ParseCpuList("\n"), (std::vector<int>{}));
  EXPECT_EQ(ParseCpuList("3,1-2,2"), (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(ParseCpuList("3-1"));
  EXPECT_FALSE(ParseCpuList("a"));
  EXPECT_FALSE(ParseCpuList("1,,2"));
  EXPECT_FALSE(ParseCpuList("0-99999999"));
}

TEST(CpuTopology, CountsPhysicalCoresFromSysfs) {
  const ReadTextFn read = Files(Sysfs(1, 8));  // 8 cores, 16 hardware threads
  EXPECT_EQ(CountPhysicalCores(Range(16), read), 8);
  EXPECT_EQ(CountPhysicalCores(std::vector<int>{0, 8}, read), 1);  // two siblings: one core
  EXPECT_EQ(CountPhysicalCores(std::vector<int>{0, 1, 2, 3}, read), 4);
  // Two packages with the same core ids: cores of different packages are different cores.
  EXPECT_EQ(CountPhysicalCores(Range(32), Files(Sysfs(2, 8))), 16);
  // A CPU whose topology cannot be read: no answer (the caller falls back).
  EXPECT_FALSE(CountPhysicalCores(std::vector<int>{0, 99}, read));
  std::map<std::string, std::string> bad = Sysfs(1, 2);
  bad["/sys/devices/system/cpu/cpu1/topology/core_id"] = "x\n";
  EXPECT_FALSE(CountPhysicalCores(Range(4), Files(bad)));
}

constexpr const char* kCpuinfo =
    "processor\t: 0\nvendor_id\t: GenuineIntel\nphysical id\t: 0\ncore id\t\t: 0\n\n"
    "processor\t: 1\nphysical id\t: 0\ncore id\t\t: 1\n\n"
    "processor\t: 2\nphysical id\t: 0\ncore id\t\t: 0\n\n"
    "processor\t: 3\nphysical id\t: 0\ncore id\t\t: 1\n\n";

TEST(CpuTopology, CountsPhysicalCoresFromCpuinfo) {
  EXPECT_EQ(CountPhysicalCoresFromCpuinfo(kCpuinfo, Range(4)), 2);
  EXPECT_EQ(CountPhysicalCoresFromCpuinfo(kCpuinfo, std::vector<int>{1, 3}), 1);
  EXPECT_FALSE(CountPhysicalCoresFromCpuinfo(kCpuinfo, std::vector<int>{4}));
  // Without the ids (some virtual machines, other architectures): no answer.
  EXPECT_FALSE(CountPhysicalCoresFromCpuinfo("processor\t: 0\nprocessor\t: 1\n", Range(2)));
}

TEST(CpuTopology, ParsesCgroupQuotas) {
  EXPECT_EQ(ParseCgroupV2CpuMax("150000 100000\n"), 1.5);
  EXPECT_EQ(ParseCgroupV2CpuMax("400000 100000"), 4.0);
  EXPECT_FALSE(ParseCgroupV2CpuMax("max 100000\n"));
  EXPECT_FALSE(ParseCgroupV2CpuMax("150000"));
  EXPECT_FALSE(ParseCgroupV2CpuMax(""));
  EXPECT_EQ(ParseCgroupV1Quota("200000\n", "100000\n"), 2.0);
  EXPECT_FALSE(ParseCgroupV1Quota("-1\n", "100000\n"));
  EXPECT_FALSE(ParseCgroupV1Quota("x", "100000"));
}

TEST(CpuTopology, ParsesProcSelfCgroup) {
  const ProcCgroups v2 = ParseProcCgroup("0::/user.slice/app.scope\n");
  EXPECT_EQ(v2.v2, "/user.slice/app.scope");
  EXPECT_EQ(v2.v1_cpu, "");
  const ProcCgroups v1 = ParseProcCgroup(
      "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n3:cpuset:/docker/abc\n0::/\n");
  EXPECT_EQ(v1.v1_cpu, "/docker/abc");
  EXPECT_EQ(v1.v2, "/");
  EXPECT_EQ(ParseProcCgroup("4:cpuacct:/x\n").v1_cpu, "");  // cpuacct is not cpu
}

TEST(CpuTopology, FindsTheTightestQuotaUpTheHierarchy) {
  // cgroup v2: the process's own group has no limit, its parent has 2 CPUs.
  EXPECT_EQ(CgroupCpuQuota(Files({{"/proc/self/cgroup", "0::/user.slice/app\n"},
                                  {"/sys/fs/cgroup/user.slice/app/cpu.max", "max 100000\n"},
                                  {"/sys/fs/cgroup/user.slice/cpu.max", "200000 100000\n"}})),
            2.0);
  // A container with its own cgroup namespace: the path is "/", the files at the mount root.
  EXPECT_EQ(CgroupCpuQuota(Files(
                {{"/proc/self/cgroup", "0::/\n"}, {"/sys/fs/cgroup/cpu.max", "150000 100000\n"}})),
            1.5);
  // cgroup v1, path not visible under the mount (no cgroup namespace): the mount root's.
  EXPECT_EQ(CgroupCpuQuota(Files({{"/proc/self/cgroup", "4:cpu,cpuacct:/docker/abc\n"},
                                  {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "300000\n"},
                                  {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n"}})),
            3.0);
  // v1 and v2 both limiting: the tighter.
  EXPECT_EQ(CgroupCpuQuota(Files({{"/proc/self/cgroup", "4:cpu:/\n0::/\n"},
                                  {"/sys/fs/cgroup/unified/cpu.max", "250000 100000\n"},
                                  {"/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "500000\n"},
                                  {"/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n"}})),
            2.5);
  EXPECT_FALSE(CgroupCpuQuota(
      Files({{"/proc/self/cgroup", "0::/\n"}, {"/sys/fs/cgroup/cpu.max", "max 100000\n"}})));
  EXPECT_FALSE(CgroupCpuQuota(Files({})));
}

TEST(CpuTopology, DefaultThreadsArePhysicalCoresWithinAffinityAndQuota) {
  std::map<std::string, std::string> fs = Sysfs(1, 8);
  EXPECT_EQ(DefaultThreadCount(Range(16), Files(fs)), 8);
  // An affinity mask of 6 hardware threads on 3 cores.
  EXPECT_EQ(DefaultThreadCount(std::vector<int>{0, 1, 2, 8, 9, 10}, Files(fs)), 3);
  // A quota of 2.5 CPUs: 2 threads (a third would be throttled).
  fs["/proc/self/cgroup"] = "0::/\n";
  fs["/sys/fs/cgroup/cpu.max"] = "250000 100000\n";
  EXPECT_EQ(DefaultThreadCount(Range(16), Files(fs)), 2);
  // Below one CPU: still one thread.
  fs["/sys/fs/cgroup/cpu.max"] = "50000 100000\n";
  EXPECT_EQ(DefaultThreadCount(Range(16), Files(fs)), 1);
  // A quota above the cores changes nothing.
  fs["/sys/fs/cgroup/cpu.max"] = "2000000 100000\n";
  EXPECT_EQ(DefaultThreadCount(Range(16), Files(fs)), 8);
  // No sysfs topology: /proc/cpuinfo; neither: every allowed CPU.
  EXPECT_EQ(DefaultThreadCount(Range(4), Files({{"/proc/cpuinfo", kCpuinfo}})), 2);
  EXPECT_EQ(DefaultThreadCount(Range(6), Files({})), 6);
}

TEST(CpuTopology, ThisProcessGetsAtLeastOneThread) { EXPECT_GE(DefaultThreadCount(), 1); }

}  // namespace
}  // namespace promptcache
