// EngineImpl's modular prompt cache: registering PML schemas (encoding their modules on the
// engine thread, after reading what the remote tier holds of them on the caller's thread),
// persisting them under cache_dir, and checking PML prompts against them.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/log.h"
#include "engine/engine_impl.h"

namespace promptcache {
namespace {

namespace fs = std::filesystem;

std::string BaseDir(const std::string& path) {
  const std::string dir = fs::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

Status EngineImpl::EncodeSchema(SchemaEntry* entry, const SchemaLoadOptions& options) {
  const SchemaLayout& layout = entry->For(options_.module_positions);
  const std::vector<PmlTextRef> pieces = ModuleStore::CachedPieces(layout);
  int total = 0, done = 0;
  for (const PmlTextRef& ref : pieces) total += static_cast<int>(layout.Piece(ref).tokens.size());
  if (options.on_progress) options.on_progress(0, total);
  GatherStats gs;
  for (const PmlTextRef& ref : pieces) {
    // One piece at a time: running requests take their steps in between.
    const Status st = EnsurePiece(layout, ref, &gs);
    if (!st.ok()) return st.WithContext("schema '" + layout.name + "'");
    done += static_cast<int>(layout.Piece(ref).tokens.size());
    if (options.on_progress) options.on_progress(done, total);
  }
  entry->info.encoded_tokens = gs.encoded_tokens;
  entry->info.reused_tokens = gs.reused_tokens;
  entry->info.encode_ms = gs.encode_ms;
  return Status::Ok();
}

std::vector<RemotePrefixFetch> EngineImpl::PlanPieceReads(const SchemaLayout& layout,
                                                          const PmlTextRef& ref) const {
  std::vector<RemotePrefixFetch> plans;
  plans.push_back(cache_->PlanRemoteBlocks(store_->PieceKeys(layout.Piece(ref))));
  for (const PmlTextRef& d : ModuleStore::AllDependencies(layout, ref)) {
    plans.push_back(cache_->PlanRemoteBlocks(store_->PieceKeys(layout.Piece(d))));
  }
  return plans;
}

// The engine thread never waits on the remote tier here, as for a request's lookups
// (admission.cc) and WarmPrefix: it plans the piece's reads, this thread reads them under one
// RemoteBudget (--cache-redis-deadline), and the engine thread takes the values in with every
// check (AdoptRemoteBlocks: one that fails is a miss, counted invalid), then runs Ensure on RAM
// and disk only. A piece whose blocks were all taken in is a hit; for one that misses, the blocks
// of the pieces it is computed after are read too (the encoding gathers them), and it is encoded.
// A store that is down, slow or behind an open breaker answers nothing: the piece is encoded.
Status EngineImpl::EnsurePiece(const SchemaLayout& layout, const PmlTextRef& ref,
                               GatherStats* stats) {
  Status st;
  const auto ensure = [&] {  // on the engine thread
    st = store_->Ensure(layout, ref, stats);
    cache_->Maintain();
    UpdateStatsSnapshot();
  };
  RemoteTier* remote = cache_->remote();
  if (remote == nullptr) {
    RunOnEngineThread(ensure);
    return st;
  }
  std::vector<RemotePrefixFetch> plans;  // [0]: the piece's own blocks; then its dependencies'
  RunOnEngineThread([&] { plans = PlanPieceReads(layout, ref); });
  const int deadline_ms = options_.cache_redis_deadline_ms;
  RemoteBudget budget(deadline_ms);  // every read of the piece's
  const std::span<const RemotePrefixFetch> all(plans);
  std::vector<std::vector<RemoteValue>> values =
      FetchRemotePlans(*remote, all.first(1), deadline_ms);
  values.resize(plans.size());
  const auto adopt = [&](size_t from, size_t to) {  // on the engine thread
    for (size_t i = from; i < to; ++i) {
      if (!values[i].empty()) cache_->AdoptRemoteBlocks(plans[i], values[i]);
      values[i] = {};  // its memory goes back now
    }
  };
  // Each of its blocks read (or held here already): a hit, unless a value fails its checks.
  const bool whole = values[0].size() == plans[0].names.size();
  const bool deps = std::any_of(all.begin() + 1, all.end(),
                                [](const RemotePrefixFetch& p) { return !p.names.empty(); });
  bool ensured = false;
  if (whole || !deps) {
    RunOnEngineThread([&] {
      adopt(0, 1);
      if (!deps || store_->Present(layout, ref)) {
        ensure();
        ensured = true;
      }
    });
    if (ensured) return st;
  }
  // A miss with dependencies in the remote tier only: read them, then encode it after them.
  std::vector<std::vector<RemoteValue>> more =
      FetchRemotePlans(*remote, all.subspan(1), deadline_ms);
  std::move(more.begin(), more.end(), values.begin() + 1);
  RunOnEngineThread([&] {
    adopt(0, plans.size());  // the piece's own values too, unless taken in above
    ensure();
  });
  return st;
}

Result<SchemaInfo> EngineImpl::Register(std::string xml, const std::string& path,
                                        const SchemaLoadOptions& options, bool persisted) {
  if (!options.allow_src) PC_RETURN_IF_ERROR(CheckNoSrc(xml, path));
  PC_ASSIGN_OR_RETURN(SchemaLayout layout, ParseSchema(xml, path, encoder_));
  auto entry = std::make_shared<SchemaEntry>();
  entry->layout = std::move(layout);
  entry->contiguous = ContiguousLayout(entry->layout);
  entry->xml = std::move(xml);
  entry->base_dir = BaseDir(path);
  entry->info = DescribeSchema(entry->layout);
  std::lock_guard<std::mutex> load(load_mu_);
  if (options.encode) PC_RETURN_IF_ERROR(EncodeSchema(entry.get(), options));
  entry->info.persisted = persisted;
  if (!options_.cache_dir.empty() && options.persist && !persisted) {
    PC_RETURN_IF_ERROR(PersistSchema(options_.cache_dir, *entry));
    entry->info.persisted = true;
  }
  if (cache_->disk() != nullptr && entry->info.persisted) {
    // Module blocks go to the disk tier now, not only at shutdown: a killed process keeps them.
    Status st;
    RunOnEngineThread([&] {
      st = cache_->SaveAll();
      UpdateStatsSnapshot();
    });
    if (!st.ok())
      PC_LOG_WARN("saving schema '%s' to the disk tier: %s", entry->layout.name.c_str(),
                  st.message().c_str());
  }
  SchemaInfo info = entry->info;
  {
    std::lock_guard<std::mutex> lock(schema_mu_);
    schemas_[entry->layout.name] = std::move(entry);
  }
  return info;
}

Result<SchemaInfo> EngineImpl::LoadSchemaFile(const std::string& path,
                                              const SchemaLoadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open schema file");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return IoError(path + ": cannot read schema file");
  return Register(text.str(), path, options, /*persisted=*/false);
}

Result<SchemaInfo> EngineImpl::LoadSchemaText(std::string_view xml, const std::string& path,
                                              const SchemaLoadOptions& options) {
  return Register(std::string(xml), path, options, /*persisted=*/false);
}

void EngineImpl::ReloadPersistedSchemas() {
  if (options_.cache_dir.empty()) return;
  for (const std::string& file : PersistedSchemaFiles(options_.cache_dir)) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    SchemaLoadOptions o;
    o.persist = false;
    Result<SchemaInfo> info = Register(text.str(), file, o, /*persisted=*/true);
    if (!info.ok()) {
      PC_LOG_WARN("not reloading persisted schema %s: %s", file.c_str(),
                  info.status().message().c_str());
      continue;
    }
    PC_LOG_INFO("reloaded schema '%s': %d cached tokens, %d found in the cache, %d encoded",
                info->name.c_str(), info->cached_tokens, info->reused_tokens, info->encoded_tokens);
  }
}

std::vector<SchemaInfo> EngineImpl::ListSchemas() const {
  std::lock_guard<std::mutex> lock(schema_mu_);
  std::vector<SchemaInfo> out;
  for (const auto& [name, e] : schemas_) out.push_back(e->info);
  return out;
}

Result<SchemaInfo> EngineImpl::GetSchema(const std::string& name) const {
  PC_ASSIGN_OR_RETURN(auto layout, GetSchemaLayout(name));
  std::lock_guard<std::mutex> lock(schema_mu_);
  auto it = schemas_.find(name);
  if (it == schemas_.end()) return NotFound("no schema '" + name + "'");
  return it->second->info;
}

Result<std::shared_ptr<const SchemaLayout>> EngineImpl::GetSchemaLayout(
    const std::string& name) const {
  std::lock_guard<std::mutex> lock(schema_mu_);
  auto it = schemas_.find(name);
  if (it == schemas_.end()) {
    std::string names;
    for (const auto& [n, e] : schemas_) names += (names.empty() ? "" : ", ") + n;
    return NotFound("no schema '" + name + "' (loaded: " + (names.empty() ? "none" : names) + ")");
  }
  return std::shared_ptr<const SchemaLayout>(it->second, &it->second->layout);
}

Status EngineImpl::DropSchema(const std::string& name) {
  std::shared_ptr<const SchemaEntry> dropped;
  std::set<std::string> kept;  // content keys of pieces other schemas still use
  {
    std::lock_guard<std::mutex> lock(schema_mu_);
    auto it = schemas_.find(name);
    if (it == schemas_.end()) return NotFound("no schema '" + name + "'");
    dropped = it->second;
    schemas_.erase(it);
    for (const auto& [n, e] : schemas_) {
      for (const SchemaLayout* l : {&e->layout, &e->contiguous}) {
        for (const PmlTextRef& ref : ModuleStore::CachedPieces(*l)) kept.insert(l->Piece(ref).key);
      }
    }
  }
  Status st;
  if (!options_.cache_dir.empty()) st = RemovePersistedSchema(options_.cache_dir, name);
  RunOnEngineThread([&] {
    for (const SchemaLayout* l : {&dropped->layout, &dropped->contiguous}) {
      for (const PmlTextRef& ref : ModuleStore::CachedPieces(*l)) {
        if (!kept.count(l->Piece(ref).key)) store_->Drop(*l, ref);
      }
    }
    UpdateStatsSnapshot();
  });
  return st;
}

Result<EngineImpl::Planned> EngineImpl::Plan(const PmlPrompt& prompt) const {
  for (const PmlPromptText& t : prompt.text) {
    if (!t.role.empty() && t.role != "system" && t.role != "user" && t.role != "assistant") {
      return InvalidArgument(prompt.file + ": prompt: unknown chat role '" + t.role +
                             "' (expected system, user or assistant)");
    }
  }
  Planned p;
  {
    std::lock_guard<std::mutex> lock(schema_mu_);
    std::vector<const SchemaLayout*> layouts;
    for (const auto& [n, e] : schemas_) layouts.push_back(&e->layout);
    PC_ASSIGN_OR_RETURN(const SchemaLayout* layout, FindPromptSchema(prompt, layouts));
    p.schema = schemas_.at(layout->name);
  }
  PC_ASSIGN_OR_RETURN(PmlPlan plan, PlanPrompt(p.schema->layout, prompt, encoder_));
  PC_RETURN_IF_ERROR(AddGenerationPrompt(prompt, encoder_, &plan));
  p.positions =
      prompt.positions == PmlPositions::kDefault ? options_.module_positions : prompt.positions;
  p.recompute = prompt.recompute >= 0 ? prompt.recompute : options_.module_recompute;
  p.prefill = BuildPrefill(p.schema->layout, plan, p.positions);
  if (p.prefill.tokens.empty()) {
    return InvalidArgument(prompt.file + ": prompt for schema '" + prompt.schema +
                           "' includes no text at all");
  }
  if (p.prefill.end >= context_) {
    return OutOfRange(prompt.file + ": prompt for schema '" + prompt.schema +
                      "' ends at position " + std::to_string(p.prefill.end) +
                      ", leaving no room to generate in a " + std::to_string(context_) +
                      "-token context");
  }
  return p;
}

Result<std::shared_ptr<RequestHandle>> EngineImpl::SubmitPrompt(const PmlPrompt& prompt,
                                                                CompletionRequest request) {
  if (!request.prompt.empty()) {
    return InvalidArgument(
        "a modular prompt takes its tokens from its schema: leave the "
        "request's token prompt empty");
  }
  PC_RETURN_IF_ERROR(ValidateRequest(request));
  PC_ASSIGN_OR_RETURN(Planned planned, Plan(prompt));
  return EnqueueModular(std::move(request), std::move(planned));
}

Result<std::shared_ptr<RequestHandle>> EngineImpl::SubmitPml(std::string_view xml,
                                                             CompletionRequest request,
                                                             const std::string& file) {
  PC_ASSIGN_OR_RETURN(PmlPrompt prompt, ParsePrompt(xml, file));
  return SubmitPrompt(prompt, std::move(request));
}

Result<ExpandedPrompt> EngineImpl::ExpandPrompt(const PmlPrompt& prompt) const {
  PC_ASSIGN_OR_RETURN(Planned p, Plan(prompt));
  ExpandedPrompt out;
  out.tokens = std::move(p.prefill.tokens);
  out.positions = std::move(p.prefill.positions);
  out.cached_tokens = p.prefill.cached_tokens;
  out.end = p.prefill.end;
  return out;
}

Result<CacheTierCounts> EngineImpl::LookupPrompt(const PmlPrompt& prompt) const {
  PC_ASSIGN_OR_RETURN(Planned p, Plan(prompt));
  const SchemaLayout& layout = p.schema->For(p.positions);
  struct Piece {
    std::vector<BlockKey> keys;
    int tokens = 0;
    int tier = 3;  // 0 RAM, 1 disk, 2 remote, 3 none
  };
  std::vector<Piece> pieces;
  for (const PrefillStage& stage : p.prefill.stages) {
    for (const PrefillGather& g : stage.gather) {
      const PmlTextPiece piece =
          g.deps ? ModuleStore::Variant(layout, g.ref, *g.deps) : layout.Piece(g.ref);
      pieces.push_back({store_->PieceKeys(piece), int(piece.tokens.size())});
    }
  }
  const int bs = blocks_.layout().block_size;
  RunOnEngineThread([&] {
    for (Piece& piece : pieces) {
      const TierCounts t = cache_->Probe(piece.keys);
      const int all = int(piece.keys.size()) * bs;
      piece.tier = t.ram == all ? 0 : t.local == all ? 1 : 3;
    }
  });
  CacheTierCounts out;
  out.prompt_tokens = static_cast<int>(p.prefill.tokens.size());
  for (Piece& piece : pieces) {
    // Asked on the caller's thread, like LookupCache: the engine never waits for the remote tier.
    if (piece.tier == 3 && cache_->remote() != nullptr &&
        cache_->RemoteLeading({}, piece.keys) == int(piece.keys.size())) {
      piece.tier = 2;
    }
    int* counts[] = {&out.ram, &out.disk, &out.remote};
    if (piece.tier < 3) *counts[piece.tier] += piece.tokens;
  }
  out.reusable = out.ram + out.disk + out.remote;
  return out;
}

}  // namespace promptcache
