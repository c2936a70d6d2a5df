#include "engine/modular.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <pugixml.hpp>
#include <sstream>

namespace promptcache {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSchemaFile = "schema.xml";

Status WriteFile(const fs::path& path, std::string_view text) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return IoError("cannot create " + path.parent_path().string() + ": " + ec.message());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !out.write(text.data(), static_cast<std::streamsize>(text.size())) || !out.flush()) {
    return IoError("cannot write " + path.string());
  }
  return Status::Ok();
}

Result<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot read " + path.string());
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return IoError("cannot read " + path.string());
  return s.str();
}

// Line and column (1-based, in bytes) of a byte offset.
std::pair<int, int> LineColumn(std::string_view text, ptrdiff_t offset) {
  int line = 1, col = 1;
  for (ptrdiff_t i = 0; i < offset && i < static_cast<ptrdiff_t>(text.size()); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

}  // namespace

Status CheckNoSrc(std::string_view xml, const std::string& path) {
  pugi::xml_document doc;
  if (!doc.load_buffer(xml.data(), xml.size(), pugi::parse_default)) return Status::Ok();
  const std::string schema = doc.document_element().attribute("name").value();
  for (const pugi::xpath_node& x : doc.select_nodes("//module[@src]")) {
    const pugi::xml_node m = x.node();
    // offset_debug points at the element name, one past its '<'.
    const auto [line, col] = LineColumn(xml, m.offset_debug() - 1);
    return InvalidArgument(path + ":" + std::to_string(line) + ":" + std::to_string(col) +
                           ": schema '" + schema + "': module '" + m.attribute("name").value() +
                           "': src attributes are not accepted here; give the text inline");
  }
  return Status::Ok();
}

Status PersistSchema(const std::string& cache_dir, const SchemaEntry& entry) {
  const std::string& name = entry.layout.name;
  const fs::path root = fs::path(cache_dir) / "schemas";
  static std::atomic<int> counter{0};
  const fs::path tmp =
      root / ("." + name + ".tmp" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::error_code ec;
  fs::remove_all(tmp, ec);
  Status st = WriteFile(tmp / kSchemaFile, entry.xml);
  for (const PmlModule& m : entry.layout.modules) {
    if (!st.ok() || m.src.empty()) continue;
    if (fs::path(m.src).lexically_normal() == kSchemaFile) {
      st = InvalidArgument("schema '" + name + "': cannot persist module '" + m.name +
                           "': its src file is named " + kSchemaFile);
      break;
    }
    Result<std::string> text = ReadFile(fs::path(entry.base_dir) / m.src);
    st = text.ok() ? WriteFile(tmp / m.src, *text) : text.status();
  }
  if (st.ok()) {
    fs::remove_all(root / name, ec);
    fs::rename(tmp, root / name, ec);
    if (ec)
      st = IoError("cannot move the schema into " + (root / name).string() + ": " + ec.message());
  }
  if (!st.ok()) fs::remove_all(tmp, ec);
  return st;
}

Status RemovePersistedSchema(const std::string& cache_dir, const std::string& name) {
  std::error_code ec;
  fs::remove_all(fs::path(cache_dir) / "schemas" / name, ec);
  if (ec) return IoError("cannot remove the persisted schema '" + name + "': " + ec.message());
  return Status::Ok();
}

std::vector<std::string> PersistedSchemaFiles(const std::string& cache_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path root = fs::path(cache_dir) / "schemas";
  for (const auto& d : fs::directory_iterator(root, ec)) {
    const std::string dir_name = d.path().filename().string();
    if (dir_name.empty() || dir_name[0] == '.' || !d.is_directory()) continue;
    if (fs::is_regular_file(d.path() / kSchemaFile, ec)) {
      out.push_back((d.path() / kSchemaFile).string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

SchemaInfo DescribeSchema(const SchemaLayout& layout) {
  SchemaInfo info;
  info.name = layout.name;
  info.file = layout.file;
  info.total_length = layout.total_length;
  info.modules = static_cast<int>(layout.modules.size());
  for (const PmlTextPiece& p : layout.always)
    info.cached_tokens += static_cast<int>(p.tokens.size());
  for (const PmlModule& m : layout.modules) {
    if (!m.cached) continue;
    info.cached_modules++;
    info.cached_tokens += m.token_count;
  }
  info.layout = FormatLayout(layout);
  return info;
}

PromptBuilder::PromptBuilder(std::string schema) {
  prompt_.schema = std::move(schema);
  prompt_.file = "prompt";
}

PmlModuleRef* PromptBuilder::Find(std::string_view path) {
  std::vector<PmlModuleRef>* level = &prompt_.modules;
  PmlModuleRef* ref = nullptr;
  while (true) {
    const size_t slash = path.find('/');
    const std::string_view name = path.substr(0, slash);
    auto it = std::find_if(level->begin(), level->end(),
                           [&](const PmlModuleRef& r) { return r.name == name; });
    if (it == level->end()) {
      level->push_back(PmlModuleRef{});
      level->back().name = std::string(name);
      it = level->end() - 1;
    }
    ref = &*it;
    if (slash == std::string_view::npos) return ref;
    path.remove_prefix(slash + 1);
    level = &ref->children;
  }
}

PromptBuilder& PromptBuilder::Module(std::string_view path) {
  Find(path);
  return *this;
}

PromptBuilder& PromptBuilder::Argument(std::string_view path, std::string parameter,
                                       std::string value) {
  Find(path)->arguments.emplace_back(std::move(parameter), std::move(value));
  return *this;
}

PromptBuilder& PromptBuilder::Text(std::string text) {
  prompt_.text.push_back({"", std::move(text), {}});
  return *this;
}

PromptBuilder& PromptBuilder::Turn(std::string role, std::string text) {
  prompt_.text.push_back({std::move(role), std::move(text), {}});
  return *this;
}

}  // namespace promptcache
