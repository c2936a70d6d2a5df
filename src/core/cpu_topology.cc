#include "core/cpu_topology.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "core/text.h"

namespace promptcache {
namespace {

// The whole of `s` (trimmed) as an integer.
std::optional<int64_t> ParseInt(std::string_view s) {
  s = Trim(s);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::string> ReadRealFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The parent of a cgroup path ("/a/b" -> "/a", "/a" -> "/"); "" above the root.
std::string Parent(const std::string& path) {
  if (path.empty() || path == "/") return "";
  const size_t slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

void Tighten(std::optional<double> q, std::optional<double>* best) {
  if (q && (!*best || *q < **best)) *best = q;
}

}  // namespace

std::optional<std::vector<int>> ParseCpuList(std::string_view text) {
  text = Trim(text);
  std::vector<int> cpus;
  if (text.empty()) return cpus;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t dash = item.find('-');
    const std::optional<int64_t> lo = ParseInt(item.substr(0, dash));
    const std::optional<int64_t> hi =
        dash == std::string_view::npos ? lo : ParseInt(item.substr(dash + 1));
    // 1 << 16 CPUs: more than any kernel supports, and a bound on what a bad file can allocate.
    if (!lo || !hi || *lo < 0 || *hi < *lo || *hi >= (1 << 16)) return std::nullopt;
    for (int64_t c = *lo; c <= *hi; ++c) cpus.push_back(static_cast<int>(c));
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::optional<int> CountPhysicalCores(std::span<const int> cpus, const ReadTextFn& read) {
  std::set<std::pair<int64_t, int64_t>> cores;
  for (int cpu : cpus) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    const std::optional<std::string> package = read(dir + "physical_package_id");
    const std::optional<std::string> core = read(dir + "core_id");
    if (!package || !core) return std::nullopt;
    const std::optional<int64_t> p = ParseInt(*package), c = ParseInt(*core);
    if (!p || !c) return std::nullopt;
    cores.insert({*p, *c});
  }
  if (cores.empty()) return std::nullopt;
  return static_cast<int>(cores.size());
}

std::optional<int> CountPhysicalCoresFromCpuinfo(std::string_view cpuinfo,
                                                 std::span<const int> cpus) {
  // Per processor block: its number, physical id and core id.
  struct Proc {
    int64_t cpu = -1, package = -1, core = -1;
  };
  std::vector<Proc> procs;
  while (!cpuinfo.empty()) {
    const size_t nl = cpuinfo.find('\n');
    const std::string_view line = cpuinfo.substr(0, nl);
    cpuinfo = nl == std::string_view::npos ? std::string_view() : cpuinfo.substr(nl + 1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = Trim(line.substr(0, colon));
    const std::optional<int64_t> value = ParseInt(line.substr(colon + 1));
    if (key == "processor") {
      procs.emplace_back();
      procs.back().cpu = value.value_or(-1);
    } else if (!procs.empty() && key == "physical id") {
      procs.back().package = value.value_or(-1);
    } else if (!procs.empty() && key == "core id") {
      procs.back().core = value.value_or(-1);
    }
  }
  std::set<std::pair<int64_t, int64_t>> cores;
  for (int cpu : cpus) {
    const auto it =
        std::find_if(procs.begin(), procs.end(), [&](const Proc& p) { return p.cpu == cpu; });
    if (it == procs.end() || it->package < 0 || it->core < 0) return std::nullopt;
    cores.insert({it->package, it->core});
  }
  if (cores.empty()) return std::nullopt;
  return static_cast<int>(cores.size());
}

std::optional<double> ParseCgroupV2CpuMax(std::string_view text) {
  text = Trim(text);
  const size_t space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::optional<int64_t> quota = ParseInt(text.substr(0, space));
  const std::optional<int64_t> period = ParseInt(text.substr(space + 1));
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;  // "max": no limit
  return double(*quota) / double(*period);
}

std::optional<double> ParseCgroupV1Quota(std::string_view quota, std::string_view period) {
  const std::optional<int64_t> q = ParseInt(quota), p = ParseInt(period);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;  // -1: no limit
  return double(*q) / double(*p);
}

ProcCgroups ParseProcCgroup(std::string_view text) {
  ProcCgroups out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    // hierarchy-ID:controller-list:cgroup-path
    const size_t a = line.find(':');
    const size_t b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    const std::string path(line.substr(b + 1));
    if (id == "0" && controllers.empty()) {
      out.v2 = path;
      continue;
    }
    std::string_view rest = controllers;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      if (rest.substr(0, comma) == "cpu") out.v1_cpu = path;
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  return out;
}

std::optional<double> CgroupCpuQuota(const ReadTextFn& read) {
  const std::optional<std::string> self = read("/proc/self/cgroup");
  const ProcCgroups cg = ParseProcCgroup(self.value_or(""));
  std::optional<double> best;
  // From the process's own cgroup up to the root of what this namespace shows; the mount root
  // alone when the path is not known (or not visible under the mount, as in a container
  // without a cgroup namespace, where the root shown is the container's own cgroup).
  auto walk = [&](const std::string& mount, const std::string& path, auto&& quota_at) {
    for (std::string p = path.empty() ? "/" : path; !p.empty(); p = Parent(p)) {
      Tighten(quota_at(mount + (p == "/" ? "" : p)), &best);
    }
  };
  for (const std::string mount : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    walk(mount, cg.v2, [&](const std::string& dir) -> std::optional<double> {
      const std::optional<std::string> text = read(dir + "/cpu.max");
      return text ? ParseCgroupV2CpuMax(*text) : std::nullopt;
    });
  }
  for (const std::string mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
    walk(mount, cg.v1_cpu, [&](const std::string& dir) -> std::optional<double> {
      const std::optional<std::string> quota = read(dir + "/cpu.cfs_quota_us");
      const std::optional<std::string> period = read(dir + "/cpu.cfs_period_us");
      return quota && period ? ParseCgroupV1Quota(*quota, *period) : std::nullopt;
    });
  }
  return best;
}

int DefaultThreadCount(std::span<const int> allowed_cpus, const ReadTextFn& read) {
  std::optional<int> cores = CountPhysicalCores(allowed_cpus, read);
  if (!cores) {
    const std::optional<std::string> cpuinfo = read("/proc/cpuinfo");
    if (cpuinfo) cores = CountPhysicalCoresFromCpuinfo(*cpuinfo, allowed_cpus);
  }
  int n = cores.value_or(static_cast<int>(allowed_cpus.size()));
  // Rounded down: a thread beyond the quota would be throttled, and every job would wait for it.
  if (const std::optional<double> quota = CgroupCpuQuota(read)) {
    n = std::min(n, static_cast<int>(std::floor(*quota + 1e-9)));
  }
  return std::max(1, n);
}

int DefaultThreadCount() {
  std::vector<int> allowed;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) allowed.push_back(c);
    }
  }
  if (allowed.empty()) {
    const unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned c = 0; c < n; ++c) allowed.push_back(static_cast<int>(c));
  }
  return DefaultThreadCount(allowed, ReadRealFile);
}

}  // namespace promptcache
