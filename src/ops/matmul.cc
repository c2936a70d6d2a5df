#include "ops/matmul.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/check.h"
#include "ops/matmul_internal.h"
#include "ops/quant.h"

namespace promptcache {
namespace {

using internal::MatMulJob;

const WeightTypeInfo& CheckMatrix(const WeightMatrix& w) {
  const WeightTypeInfo* t = FindWeightType(w.type);
  PC_CHECK(t != nullptr);
  PC_CHECK(w.rows >= 0 && w.cols >= 0);
  PC_CHECK(w.cols % t->block_elems == 0);
  PC_CHECK(w.row_bytes >= static_cast<size_t>(w.cols / t->block_elems * t->block_bytes));
  return *t;
}

// Activations in one quantized form, prepared once per call before the parallel part; grows and
// is reused, so the steady state allocates nothing.
struct FormBuffers {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int16_t> sums;
  std::vector<float> s;

  internal::QuantizedActs Prepare(ActFormat format, int64_t n_tokens, int64_t cols) {
    const int64_t block = internal::QuantizedActs::Block(format);
    const int64_t group = internal::QuantizedActs::Group(format);
    const size_t elems = static_cast<size_t>(n_tokens * cols);
    if (q.size() < elems) q.resize(elems);
    if (d.size() < elems / block) d.resize(elems / block);
    if (sums.size() < elems / group) sums.resize(elems / group);
    if (format == ActFormat::kQ8_0 && s.size() < elems / block) s.resize(elems / block);
    return {q.data(), d.data(), sums.data(), s.data()};
  }
};

// Quantizes x's n_tokens rows (after `before` writes them) once per activation form the matrices
// need (need[] by ActFormat), before the row-parallel part, split by tokens (one parallel job,
// none on one thread or when there is nothing to prepare).
// acts[] point into thread-local buffers, valid until this thread's next call.
void QuantizeInputs(const bool need[3], const float* x, int64_t n_tokens, int64_t cols,
                    ThreadPool* pool, const TokenRowsFn* before, internal::QuantizedActs acts[3]) {
  thread_local FormBuffers buffers[3];
  for (ActFormat f : {ActFormat::kQ8_0, ActFormat::kQ8_K}) {
    const int i = static_cast<int>(f);
    if (need[i]) acts[i] = buffers[i].Prepare(f, n_tokens, cols);
  }
  auto prepare = [&](int64_t t0, int64_t t1) {
    if (before != nullptr) (*before)(t0, t1);
    for (ActFormat f : {ActFormat::kQ8_0, ActFormat::kQ8_K}) {
      const int i = static_cast<int>(f);
      if (!need[i]) continue;
      const internal::QuantizedActs a = acts[i].From(f, t0, cols);
      internal::QuantizeActivations(f, x + t0 * cols, (t1 - t0) * cols, const_cast<int8_t*>(a.q),
                                    const_cast<float*>(a.d), const_cast<int16_t*>(a.sums),
                                    const_cast<float*>(a.s));
    }
  };
  if (need[1] || need[2] || before != nullptr) {
    if (pool != nullptr && pool->size() > 1 && n_tokens > 1) {
      pool->ParallelFor(n_tokens, prepare);
    } else {
      prepare(0, n_tokens);
    }
  }
}

// One call's work (MatMulMulti, MatMulGrouped): units are row tiles of every matrix, numbered
// across the matrices in order; each thread takes a contiguous range of them. Matrix i
// multiplies its own rows of x (all of them in MatMulMulti; an expert's tokens in
// MatMulGrouped). Thread-local and reused: the steady state allocates nothing.
struct MultiPlan {
  static constexpr int64_t kTile = internal::kRowTile;
  const WeightMatrix* ws = nullptr;
  int n = 0;
  std::vector<const WeightTypeInfo*> info;
  std::vector<MatMulJob> jobs;
  std::vector<int64_t> first_unit;  // matrix i's tiles: [first_unit[i], first_unit[i + 1])

  // Sets every matrix's job and tiles (ws, n and info set): matrix i takes rows
  // [first_row[i], first_row[i] + n_rows[i]) of x (quantized in acts) into outs[i].
  void Tile(const float* x, const int64_t* first_row, const int64_t* n_rows,
            const internal::QuantizedActs acts[3], float* const* outs) {
    jobs.resize(n);
    first_unit.resize(n + 1);
    first_unit[0] = 0;
    const int64_t cols = ws[0].cols;
    for (int i = 0; i < n; ++i) {
      const int64_t r = first_row[i];
      jobs[i].w = &ws[i];
      jobs[i].info = info[i];
      jobs[i].x = x + r * cols;
      jobs[i].xq = acts[static_cast<int>(info[i]->act)].From(info[i]->act, r, cols);
      jobs[i].n_tokens = n_rows[i];
      jobs[i].out = outs[i];
      // A matrix without rows to multiply has no work.
      const int64_t tiles = n_rows[i] > 0 ? (ws[i].rows + kTile - 1) / kTile : 0;
      first_unit[i + 1] = first_unit[i] + tiles;
    }
  }

  // Units [u0, u1): each matrix's rows there, all tokens. Returns the bytes of weights read.
  int64_t RunUnits(int64_t u0, int64_t u1) const {
    int64_t bytes = 0;
    for (int i = 0; i < n; ++i) {
      const int64_t b = std::max(u0, first_unit[i]), e = std::min(u1, first_unit[i + 1]);
      if (b >= e) continue;
      const int64_t r0 = (b - first_unit[i]) * kTile;
      const int64_t r1 = std::min(ws[i].rows, (e - first_unit[i]) * kTile);
      bytes += (r1 - r0) * static_cast<int64_t>(ws[i].row_bytes);
      switch (internal::ChooseKernelPath(*info[i], ws[i])) {
        case internal::KernelPath::kFloat:
          internal::FloatMatMulRows(jobs[i], r0, r1);
          break;
        case internal::KernelPath::kPacked:
          internal::PackedMatMulRows(jobs[i], r0, r1);
          break;
        case internal::KernelPath::kUnpacked:
          internal::IntMatMulRows(jobs[i], r0, r1);
          break;
      }
    }
    return bytes;
  }
};

// Decoding: one contiguous range of tiles per task, a long stream through the weights each, cut
// where the bytes of weights (not the rows) are even: matrices of one call may differ in type
// (Q4_K_M's attn_v is Q6_K beside Q4_K). And no more tasks than kMinTaskBytes each: a small
// matrix split over many threads costs them more in synchronization than it saves (smollm2-135m
// generated slower at 8 threads than at 4 on a 16-core machine); the threads without a task take
// no part in the job.
void RunDecodeTasks(const MultiPlan& plan, ThreadPool* pool) {
  constexpr int64_t kMinTaskBytes = int64_t(64) << 10;
  const int n = plan.n;
  const int64_t* first_unit = plan.first_unit.data();
  const int64_t units = first_unit[n];
  // (Thread-local storage named through a reference: the tasks run on other threads.)
  thread_local std::vector<int64_t> tile_bytes_storage;
  std::vector<int64_t>& tile_bytes = tile_bytes_storage;
  tile_bytes.resize(n);
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    tile_bytes[i] = MultiPlan::kTile * static_cast<int64_t>(plan.ws[i].row_bytes);
    total += (first_unit[i + 1] - first_unit[i]) * tile_bytes[i];
  }
  const int64_t tasks =
      std::clamp<int64_t>(total / kMinTaskBytes, 1, std::min<int64_t>(pool->size(), units));
  // Task k's first tile: where the bytes before it reach k / tasks of the total, rounded to a
  // whole pair of tiles (the pair kernels take two at once).
  auto first_of = [&](int64_t k) {
    const int64_t target = total * k / tasks;
    int64_t before = 0;
    for (int i = 0; i < n; ++i) {
      const int64_t count = first_unit[i + 1] - first_unit[i];
      if (target < before + count * tile_bytes[i]) {
        const int64_t u = (target - before + tile_bytes[i] - 1) / tile_bytes[i];
        return first_unit[i] + std::min(count, (u + 1) & ~int64_t(1));
      }
      before += count * tile_bytes[i];
    }
    return units;
  };
  pool->RunTasks(tasks, [&](int64_t k, int thread) {
    pool->CountBytes(thread, plan.RunUnits(first_of(k), k + 1 == tasks ? units : first_of(k + 1)));
  });
}

std::atomic<bool> vnni_disabled{false};

}  // namespace

namespace internal {
bool VnniEnabled() {
  static const bool supported = __builtin_cpu_supports("avx512vnni");
  return supported && !vnni_disabled.load(std::memory_order_relaxed);
}
void SetVnniDisabledForTest(bool disabled) { vnni_disabled = disabled; }
}  // namespace internal

bool MatMulSupports(GgmlType type) { return FindWeightType(type) != nullptr; }

bool MatMulQuantizesActivations(GgmlType type) {
  const WeightTypeInfo* t = FindWeightType(type);
  return t != nullptr && t->act != ActFormat::kFloat;
}

void MatMul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* out, ThreadPool* pool,
            const TokenRowsFn* before) {
  float* outs[1] = {out};
  MatMulMulti(&w, 1, x, n_tokens, outs, pool, before);
}

namespace {

// MatMulMulti's and MatMulGrouped's common part: matrix i multiplies rows [first_row[i],
// first_row[i] + n_rows[i]) of x's x_rows rows.
void RunPlan(const WeightMatrix* ws, int n, const int64_t* first_row, const int64_t* n_rows,
             const float* x, int64_t x_rows, float* const* outs, ThreadPool* pool,
             const TokenRowsFn* before) {
  if (n <= 0 || x_rows <= 0) return;
  // Named through a reference: the pool's threads read the caller's plan, not their own.
  thread_local MultiPlan plan_storage;
  MultiPlan& plan = plan_storage;
  plan.ws = ws;
  plan.n = n;
  plan.info.resize(n);
  bool need[3] = {false, false, false};  // by ActFormat
  int64_t work = 0, max_rows = 0;
  for (int i = 0; i < n; ++i) {
    plan.info[i] = &CheckMatrix(ws[i]);
    PC_CHECK(ws[i].cols == ws[0].cols);
    PC_CHECK(first_row[i] >= 0 && n_rows[i] >= 0 && first_row[i] + n_rows[i] <= x_rows);
    need[static_cast<int>(plan.info[i]->act)] = true;
    work += ws[i].rows * ws[i].cols * n_rows[i];
    max_rows = std::max(max_rows, n_rows[i]);
  }
  internal::QuantizedActs acts[3];
  QuantizeInputs(need, x, x_rows, ws[0].cols, pool, before, acts);
  plan.Tile(x, first_row, n_rows, acts, outs);

  const int64_t units = plan.first_unit[n];
  // Below this many multiply-adds a fork/join costs more than it saves (tiny models, and any
  // model when the machine is oversubscribed and a worker may not be running).
  constexpr int64_t kMinParallelWork = int64_t(1) << 17;
  // From this many tokens the units are taken dynamically; decoding keeps one contiguous range
  // per thread (one long stream through the weights each).
  constexpr int64_t kMinDynamicTokens = 16;
  if (pool == nullptr || pool->size() == 1 || work < kMinParallelWork) {
    const int64_t bytes = plan.RunUnits(0, units);
    if (pool != nullptr) pool->CountBytes(0, bytes);
  } else if (max_rows >= kMinDynamicTokens) {
    // Prompts: about kChunksPerThread chunks per thread, taken as threads come free, so one slowed
    // thread does not hold the other up (a third of a waiting thread's time was spent so on this
    // project's shared machines); whole pairs of tiles, which the pair kernels take together.
    constexpr int64_t kChunksPerThread = 8;
    const int64_t chunk = std::max<int64_t>(2, (units / (kChunksPerThread * pool->size())) & ~1);
    pool->ParallelForDynamic(units, chunk, [&](int64_t u0, int64_t u1, int thread) {
      pool->CountBytes(thread, plan.RunUnits(u0, u1));
    });
  } else if (units > 0) {
    RunDecodeTasks(plan, pool);
  }
}

}  // namespace

void MatMulMulti(const WeightMatrix* ws, int n, const float* x, int64_t n_tokens,
                 float* const* outs, ThreadPool* pool, const TokenRowsFn* before) {
  PC_CHECK(n <= 8);
  const int64_t first[8] = {}, rows[8] = {n_tokens, n_tokens, n_tokens, n_tokens,
                                          n_tokens, n_tokens, n_tokens, n_tokens};
  RunPlan(ws, n, first, rows, x, n_tokens, outs, pool, before);
}

void MatMulGrouped(const WeightMatrix* ws, int n, const int64_t* first_row, const int64_t* n_rows,
                   const float* x, int64_t x_rows, float* const* outs, ThreadPool* pool,
                   const TokenRowsFn* before) {
  RunPlan(ws, n, first_row, n_rows, x, x_rows, outs, pool, before);
}

const char* MatMulKernelName(const WeightMatrix& w) {
  const WeightTypeInfo* t = FindWeightType(w.type);
  if (t == nullptr) return "unsupported";
  switch (internal::ChooseKernelPath(*t, w)) {
    case internal::KernelPath::kFloat:
      return internal::FloatKernelName(w.type);
    case internal::KernelPath::kPacked:
      return internal::PackedKernelName(w.type);
    case internal::KernelPath::kUnpacked:
      return internal::IntKernelName(w.type);
  }
  return "unsupported";
}

void MatMulReference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* out) {
  CheckMatrix(w);
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    DequantizeRow(w.type, w.data + r * w.row_bytes, w.cols, row.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * w.cols;
      double sum = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) sum += static_cast<double>(row[c]) * xt[c];
      out[t * w.rows + r] = static_cast<float>(sum);
    }
  }
}

void MatMulIntFormReference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* out) {
  const WeightTypeInfo& t = CheckMatrix(w);
  PC_CHECK(t.act != ActFormat::kFloat);
  const int64_t block = internal::QuantizedActs::Block(t.act);
  const int64_t group = internal::QuantizedActs::Group(t.act);
  std::vector<int8_t> q(static_cast<size_t>(w.cols));
  std::vector<float> d(static_cast<size_t>(w.cols / block));
  std::vector<int16_t> sums(static_cast<size_t>(w.cols / group));
  std::vector<float> s(static_cast<size_t>(w.cols / 32));
  for (int64_t k = 0; k < n_tokens; ++k) {
    QuantizeActivationsReference(t.act, x + k * w.cols, w.cols, q.data(), d.data(), sums.data(),
                                 s.data());
    for (int64_t r = 0; r < w.rows; ++r) {
      out[k * w.rows + r] = DotIntForm(t, w.data + r * w.row_bytes, w.cols,
                                       {q.data(), d.data(), sums.data(), s.data()});
    }
  }
}

}  // namespace promptcache
