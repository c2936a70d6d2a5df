// `promptcache quantize IN.gguf OUT.gguf TYPE`: a model file rewritten in a llama-quantize file
// type (Q4_K_M, Q8_0, ...), with that type's mix of tensor types (model/quant_mix.h). All
// metadata is kept (general.file_type set to the new type); norms and other 1-D tensors are
// copied as they are. The output is streamed tensor by tensor: each is converted row by row,
// in parallel, straight into the writer's buffer, so no float copy of the model is ever held.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/log.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "model/quant_mix.h"
#include "ops/quant.h"
#include "tools/cli_common.h"

namespace promptcache::cli {
namespace {

bool IsFloatType(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16;
}

// One tensor of the output: its source and the type it is written in.
struct PlannedTensor {
  const GgufTensorInfo* source;
  GgmlType type;
  size_t nbytes;
};

struct Plan {
  std::vector<PlannedTensor> tensors;
  int requantized = 0;  // already quantized tensors converted to another type
  int fallbacks = 0;    // matrices whose rows the file type's block does not divide
};

Result<Plan> PlanTensors(const GgufFile& file, const QuantFileType& ftype) {
  const QuantMixModel model = QuantMixModelFromGguf(file);
  const int base_block = GetTypeTraits(ftype.base).block_elems;
  Plan plan;
  for (const GgufTensorInfo& t : file.tensors()) {
    GgmlType type = t.type;
    if (IsQuantizableTensor(t.name, t.dims)) {
      type = MixTensorType(ftype, model, t.name, t.dims[0]);
      plan.fallbacks += t.dims[0] % base_block != 0;
    }
    if (type != t.type) {
      if (!RowConversionSupports(t.type)) {
        return Unimplemented(file.path() + ": tensor '" + t.name + "' has type " +
                             GgmlTypeName(t.type) + ", which this engine cannot read");
      }
      plan.requantized += !IsFloatType(t.type);
    }
    plan.tensors.push_back({&t, type, RowBytes(type, t.dims[0]) * (t.elements() / t.dims[0])});
  }
  return plan;
}

// Writes `t`'s rows in `type` into dst: a copy when the type is unchanged, otherwise each row
// dequantized to floats and quantized again, rows shared among the pool's threads.
void ConvertTensor(const GgufTensorInfo& t, GgmlType type, ThreadPool* pool, uint8_t* dst,
                   size_t nbytes) {
  if (type == t.type) {
    std::memcpy(dst, t.data, nbytes);
    return;
  }
  const int64_t cols = t.dims[0], rows = t.elements() / cols;
  const size_t in_row = RowBytes(t.type, cols), out_row = RowBytes(type, cols);
  PC_CHECK(out_row * static_cast<size_t>(rows) == nbytes);
  pool->ParallelFor(rows, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = begin; r < end; ++r) {
      DequantizeRow(t.type, t.data + static_cast<size_t>(r) * in_row, cols, row.data());
      QuantizeRow(type, row.data(), cols, dst + static_cast<size_t>(r) * out_row);
    }
  });
}

// Drops a converted tensor's input pages from this process's resident set (the file stays in the
// page cache, and the read-only mapping refaults them if touched again): without it a 4 GiB F32
// input would end up all resident by the last tensor, though each is needed only once.
void ReleaseInput(const GgufTensorInfo& t) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t at = reinterpret_cast<uintptr_t>(t.data);
  const uintptr_t begin = at / page * page, end = (at + t.nbytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// Tensors and MiB per type, and the sizes before and after.
void PrintSummary(const std::string& in, const std::string& out, const QuantFileType& ftype,
                  const Plan& plan) {
  std::map<std::string, std::pair<int, size_t>> per_type;
  size_t before = 0, after = 0;
  int64_t weights = 0;
  for (const PlannedTensor& p : plan.tensors) {
    auto& e = per_type[GgmlTypeName(p.type)];
    e.first++;
    e.second += p.nbytes;
    before += p.source->nbytes;
    after += p.nbytes;
    weights += p.source->elements();
  }
  std::printf("%s -> %s: %s (general.file_type %u), %zu tensors\n", in.c_str(), out.c_str(),
              ftype.name, ftype.id, plan.tensors.size());
  for (const auto& [name, e] : per_type) {
    std::printf("  %-7s %4d tensors %10.2f MiB\n", name.c_str(), e.first, e.second / 1048576.0);
  }
  std::printf("size: %.2f MiB -> %.2f MiB (%.2f bits per weight)\n", before / 1048576.0,
              after / 1048576.0, weights > 0 ? 8.0 * static_cast<double>(after) / weights : 0.0);
}

class QuantizeCommand : public Command {
 public:
  void Register(CLI::App* sub) override {
    sub->add_option("input", in_, "GGUF model to quantize")->required();
    sub->add_option("output", out_, "GGUF file to write")->required();
    std::string types;
    for (const std::string& t : QuantFileTypeNames()) types += (types.empty() ? "" : ", ") + t;
    sub->add_option("type", type_, "file type (any case): " + types)->required();
    sub->add_option("-t,--threads", threads_, "threads (default: one per physical core)");
  }

  int Execute() override {
    if (threads_ < 0 || threads_ > 1024) return Fail("--threads must be in 0..1024");
    Result<QuantFileType> ftype = ParseQuantFileType(type_);
    if (!ftype.ok()) return Fail(ftype.status());
    Result<std::unique_ptr<GgufFile>> file = GgufFile::Open(in_);
    if (!file.ok()) return Fail(file.status());
    Result<Plan> plan = PlanTensors(**file, *ftype);
    if (!plan.ok()) return Fail(plan.status());
    if (plan->requantized > 0) {
      PC_LOG_WARN(
          "%d tensors of %s are already quantized: requantizing loses more than "
          "quantizing from F32, F16 or BF16 would",
          plan->requantized, in_.c_str());
    }
    if (plan->fallbacks > 0) {
      PC_LOG_WARN(
          "%d matrices have rows that %s's %d-element blocks do not divide: they use "
          "fallback types",
          plan->fallbacks, GgmlTypeName(ftype->base).c_str(),
          GetTypeTraits(ftype->base).block_elems);
    }
    GgufWriter w((*file)->alignment());
    for (const auto& [key, value] : (*file)->metadata()) w.SetValue(key, value);
    w.SetU32("general.file_type", ftype->id);
    w.SetU32("general.quantization_version", 2);  // ggml's current block layouts
    ThreadPool pool(threads_ > 0 ? threads_ : ThreadPool::DefaultThreads());
    for (const PlannedTensor& p : plan->tensors) {
      w.AddTensor(p.source->name, p.source->dims, p.type, [&pool, p](uint8_t* dst, size_t n) {
        ConvertTensor(*p.source, p.type, &pool, dst, n);
        ReleaseInput(*p.source);
      });
    }
    std::unique_ptr<ProgressBar> bar;
    const Status st = w.Write(out_, [&](size_t done, size_t total) {
      if (!bar) bar = std::make_unique<ProgressBar>("quantize", static_cast<int64_t>(total));
      bar->Update(static_cast<int64_t>(done));
    });
    if (bar) bar->Finish();
    if (!st.ok()) return Fail(st);
    PrintSummary(in_, out_, *ftype, *plan);
    return 0;
  }

 private:
  std::string in_, out_, type_;
  int threads_ = 0;
};

}  // namespace

std::unique_ptr<Command> MakeQuantizeCommand() { return std::make_unique<QuantizeCommand>(); }

}  // namespace promptcache::cli
