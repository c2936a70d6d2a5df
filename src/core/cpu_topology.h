// How many compute threads to run when the user does not say (-t 0, EngineOptions::threads = 0):
// one per physical core the process may run on, within its CPU quota.
//
// Not one per hardware thread: the two hyperthreads of a core share its vector units, which the
// matrix kernels already keep busy, and a pool's threads wait for each other at every job, so a
// thread that shares its core runs at half speed and every job waits for it. Not more than the
// affinity mask allows (taskset, a container's cpuset), nor than a cgroup CPU quota (a
// container's --cpus): threads beyond the quota are throttled in turn, and each job waits for
// the throttled one.
//
// The parsers take the text of the files (sysfs topology, /proc/cpuinfo, /proc/self/cgroup,
// cgroup v1 and v2 quota files) so that they can be tested with sample text; DefaultThreadCount()
// reads the real ones.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace promptcache {

// The text of a file, or nullopt when it cannot be read.
using ReadTextFn = std::function<std::optional<std::string>(const std::string& path)>;

// A Linux CPU list ("0-3,8,10-11\n", as in sysfs and /proc/self/status) as CPU numbers,
// ascending; nullopt when malformed.
std::optional<std::vector<int>> ParseCpuList(std::string_view text);

// Physical cores among `cpus`: distinct (physical_package_id, core_id) pairs read from
// /sys/devices/system/cpu/cpuN/topology/; nullopt when a file is missing or malformed.
std::optional<int> CountPhysicalCores(std::span<const int> cpus, const ReadTextFn& read);

// The same from /proc/cpuinfo's text (its "processor", "physical id" and "core id" lines);
// nullopt when some CPU of `cpus` is not listed with both ids.
std::optional<int> CountPhysicalCoresFromCpuinfo(std::string_view cpuinfo,
                                                 std::span<const int> cpus);

// A cgroup v2 cpu.max ("150000 100000": 1.5 CPUs); nullopt for "max ..." (no limit) or
// malformed text.
std::optional<double> ParseCgroupV2CpuMax(std::string_view text);

// cgroup v1 cpu.cfs_quota_us and cpu.cfs_period_us; nullopt for a quota of -1 (no limit) or
// malformed text.
std::optional<double> ParseCgroupV1Quota(std::string_view quota, std::string_view period);

// The process's cgroups from /proc/self/cgroup: the v2 path ("0::/path") and the v1 path of the
// hierarchy with the cpu controller ("4:cpu,cpuacct:/path"); empty when absent.
struct ProcCgroups {
  std::string v2;
  std::string v1_cpu;
};
ProcCgroups ParseProcCgroup(std::string_view text);

// The tightest CPU quota over the process's cgroup and its ancestors, v2 (mounted at
// /sys/fs/cgroup or /sys/fs/cgroup/unified) and v1 (/sys/fs/cgroup/cpu or cpu,cpuacct); nullopt
// when none is set.
std::optional<double> CgroupCpuQuota(const ReadTextFn& read);

// One thread per physical core among `allowed_cpus` (counted from sysfs, else /proc/cpuinfo,
// else every allowed CPU counts as a core), at most the CPU quota rounded down, at least 1.
int DefaultThreadCount(std::span<const int> allowed_cpus, const ReadTextFn& read);

// The same for this process: its affinity mask (sched_getaffinity) and the real files.
int DefaultThreadCount();

}  // namespace promptcache
