// `promptcache bench --profile`: prints what a Profiler (core/profile.h) gathered over the
// forward passes of one timed phase (the prompt, or the generated tokens): per operation its
// time, its parallel jobs (synchronization points) per pass and per layer, how much of it the
// calling thread runs alone, how uneven its jobs are and how long threads wait in them; the
// split by kind of operation, the spread of layer times, and each thread's busy and waiting time.
#pragma once

#include <string>

#include "core/profile.h"
#include "nlohmann/json.hpp"

namespace promptcache::cli {

// The report as text. `title` names the phase; `measured_s` is the phase's wall time as the
// benchmark timed it (the forward passes plus what runs between them: sampling, bookkeeping);
// `n_layers` divides the per-layer columns.
std::string FormatProfile(const Profiler& p, const std::string& title, double measured_s,
                          int n_layers);

// The same numbers for --json (times in microseconds per forward pass).
nlohmann::json ProfileJson(const Profiler& p, int n_layers);

}  // namespace promptcache::cli
