#include "tools/bench_profile.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <map>

namespace promptcache::cli {
namespace {

void Appendf(std::string* out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void Appendf(std::string* out, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  *out += buf;
}

double Share(int64_t part, int64_t whole) { return whole > 0 ? double(part) / whole : 0.0; }

// Bytes over nanoseconds is GB/s.
double Rate(int64_t bytes, int64_t ns) { return ns > 0 ? double(bytes) / ns : 0.0; }

// Slowest thread over the mean thread (threads that took no task count as 0): 1 is even.
double Imbalance(const Profiler::OpStats& op, int n_threads) {
  return op.busy_ns > 0 ? double(op.max_busy_ns) * n_threads / op.busy_ns : 0.0;
}

// Of the thread-time inside the op's jobs, the part no task ran: waiting to be woken, at the
// join for the slowest thread, or the whole job for a thread that took no task.
double Waiting(const Profiler::OpStats& op, int n_threads) {
  const int64_t all = op.job_ns * n_threads;
  return all > 0 ? double(op.wake_ns + op.join_ns + op.absent_ns) / all : 0.0;
}

}  // namespace

std::string FormatProfile(const Profiler& p, const std::string& title, double measured_s,
                          int n_layers) {
  std::string out;
  const int nt = p.n_threads();
  const double passes = std::max<int64_t>(1, p.passes());
  const double ms_pass = p.wall_ns() / 1e6 / passes;
  const double jobs_pass = p.jobs() / passes;
  int64_t layer_jobs = 0, job_ns = 0;
  for (int64_t j : p.layer_jobs()) layer_jobs += j;
  for (const Profiler::OpStats& op : p.ops()) job_ns += op.job_ns;
  Appendf(&out, "\nprofile: %s, %lld forward passes of %.1f tokens, %d threads\n", title.c_str(),
          static_cast<long long>(p.passes()), p.tokens() / passes, nt);
  Appendf(&out, "  forward pass %.3f ms (%.3f ms per token); outside the passes %.3f ms per pass\n",
          ms_pass, p.wall_ns() / 1e6 / std::max<int64_t>(1, p.tokens()),
          std::max(0.0, measured_s * 1e3 - p.wall_ns() / 1e6) / passes);
  Appendf(&out,
          "  parallel jobs (synchronization points) per pass: %.1f = %.2f per layer x %d layers"
          " + %.1f\n",
          jobs_pass, layer_jobs / passes / std::max(1, n_layers), n_layers,
          (p.jobs() - layer_jobs) / passes);
  Appendf(&out, "  time in parallel jobs %.1f%%, calling thread alone %.1f%%\n",
          100 * Share(job_ns, p.wall_ns()), 100 * (1 - Share(job_ns, p.wall_ns())));
  Appendf(&out,
          "  weights and K/V read per pass: %.2f MiB, %.2f GB/s over the pass (the bytes the"
          " kernels were given; caches may serve some)\n",
          p.bytes() / passes / (1 << 20), Rate(p.bytes(), p.wall_ns()));
  Appendf(&out, "  %-38s %-10s %9s %6s %9s %9s %6s %9s %7s %9s %6s\n", "operation", "kind",
          "ms/pass", "share", "us/layer", "jobs/pass", "alone", "imbalance", "waiting", "MiB/pass",
          "GB/s");
  for (const Profiler::OpStats& op : p.ops()) {
    const double ms = op.wall_ns / 1e6 / passes;
    char per_layer[32] = "-";
    if (op.in_layers) std::snprintf(per_layer, sizeof per_layer, "%.1f", ms * 1e3 / n_layers);
    char imbalance[32] = "-", waiting[32] = "-";
    if (op.jobs > 0) {
      std::snprintf(imbalance, sizeof imbalance, "%.2f", Imbalance(op, nt));
      std::snprintf(waiting, sizeof waiting, "%.0f%%", 100 * Waiting(op, nt));
    }
    Appendf(&out, "  %-38s %-10s %9.3f %5.1f%% %9s %9.1f %5.0f%% %9s %7s %9.2f %6.1f\n",
            op.name.c_str(), OpKindName(op.kind), ms, 100 * Share(op.wall_ns, p.wall_ns()),
            per_layer, op.jobs / passes, 100 * (1 - Share(op.job_ns, op.wall_ns)), imbalance,
            waiting, op.bytes / passes / (1 << 20), Rate(op.bytes, op.wall_ns));
  }
  std::map<std::string, int64_t> kinds;
  for (const Profiler::OpStats& op : p.ops()) kinds[OpKindName(op.kind)] += op.wall_ns;
  out += "  by kind:";
  for (const auto& [kind, ns] : kinds) {
    Appendf(&out, " %s %.1f%%", kind.c_str(), 100 * Share(ns, p.wall_ns()));
  }
  out += "\n";
  const std::vector<int64_t>& layers = p.layer_ns();
  if (!layers.empty()) {
    const auto [lo, hi] = std::minmax_element(layers.begin(), layers.end());
    int64_t sum = 0;
    for (int64_t ns : layers) sum += ns;
    Appendf(&out, "  layers: mean %.1f us, min %.1f us (layer %d), max %.1f us (layer %d)\n",
            sum / 1e3 / passes / layers.size(), *lo / 1e3 / passes,
            static_cast<int>(lo - layers.begin()), *hi / 1e3 / passes,
            static_cast<int>(hi - layers.begin()));
  }
  // A thread's rate is over its time working: its busy time in jobs and, for the calling thread
  // (0), the time it runs alone between them, where it reads for the work not worth a job.
  Appendf(&out, "  %-7s %10s %13s %12s %17s %15s %9s %10s\n", "thread", "jobs/pass", "busy ms/pass",
          "wake us/job", "join wait us/job", "absent ms/pass", "MiB/pass", "GB/s busy");
  for (int i = 0; i < nt; ++i) {
    const Profiler::ThreadStats& th = p.threads()[i];
    const double jobs = std::max<int64_t>(1, th.jobs);
    Appendf(&out, "  %-7d %10.1f %13.3f %12.2f %17.2f %15.3f %9.2f %10.1f\n", i, th.jobs / passes,
            th.busy_ns / 1e6 / passes, th.wake_ns / 1e3 / jobs, th.join_ns / 1e3 / jobs,
            th.absent_ns / 1e6 / passes, th.bytes / passes / (1 << 20),
            Rate(th.bytes, th.busy_ns + (i == 0 ? p.wall_ns() - job_ns : 0)));
  }
  return out;
}

nlohmann::json ProfileJson(const Profiler& p, int n_layers) {
  const double passes = std::max<int64_t>(1, p.passes());
  const int nt = p.n_threads();
  nlohmann::json ops = nlohmann::json::array();
  for (const Profiler::OpStats& op : p.ops()) {
    ops.push_back({{"name", op.name},
                   {"kind", OpKindName(op.kind)},
                   {"us_per_pass", op.wall_ns / 1e3 / passes},
                   {"jobs_per_pass", op.jobs / passes},
                   {"alone", 1 - Share(op.job_ns, op.wall_ns)},
                   {"imbalance", Imbalance(op, nt)},
                   {"waiting", Waiting(op, nt)},
                   {"bytes_per_pass", op.bytes / passes}});
  }
  nlohmann::json per_thread = nlohmann::json::array();
  for (const Profiler::ThreadStats& th : p.threads()) {
    per_thread.push_back({{"jobs_per_pass", th.jobs / passes},
                          {"busy_us_per_pass", th.busy_ns / 1e3 / passes},
                          {"bytes_per_pass", th.bytes / passes}});
  }
  int64_t layer_jobs = 0;
  for (int64_t j : p.layer_jobs()) layer_jobs += j;
  return {{"passes", p.passes()},
          {"tokens", p.tokens()},
          {"threads", nt},
          {"us_per_pass", p.wall_ns() / 1e3 / passes},
          {"jobs_per_pass", p.jobs() / passes},
          {"jobs_per_layer", layer_jobs / passes / std::max(1, n_layers)},
          {"bytes_per_pass", p.bytes() / passes},
          {"ops", ops},
          {"per_thread", per_thread}};
}

}  // namespace promptcache::cli
