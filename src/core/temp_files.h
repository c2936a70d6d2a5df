// Files a process writes for its own use and must not leave behind: tests synthesize models and
// make cache directories under the temporary directory, and the Engine opens them by path, so
// they cannot be unlinked right after writing. Registering a path removes it (file or directory)
// when the process exits normally; a test that aborts leaves its files, named with its pid.
#ifndef PROMPTCACHE_CORE_TEMP_FILES_H_
#define PROMPTCACHE_CORE_TEMP_FILES_H_

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace promptcache {

namespace temp_files_internal {

struct Registry {
  std::mutex mu;
  std::vector<std::string> paths;
};

// Never destroyed: the exit handler runs after static destructors may have run.
inline Registry& Paths() {
  static Registry* r = new Registry;
  return *r;
}

inline void RemoveAll() {
  Registry& r = Paths();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const std::string& p : r.paths) {
    std::error_code ec;
    std::filesystem::remove_all(p, ec);
  }
  r.paths.clear();
}

}  // namespace temp_files_internal

// Removes `path` (a file or a directory tree) when the process exits normally; returns it.
inline std::string RemoveAtExit(std::string path) {
  temp_files_internal::Registry& r = temp_files_internal::Paths();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.paths.empty()) std::atexit(temp_files_internal::RemoveAll);
  r.paths.push_back(path);
  return path;
}

// A path under the temporary directory named `name` and the process id, with nothing there now
// (whatever an earlier run left is removed) and removed at exit: a test's cache directory.
inline std::string EmptyTempPathAtExit(const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / (name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(p);
  return RemoveAtExit(p.string());
}

}  // namespace promptcache

#endif  // PROMPTCACHE_CORE_TEMP_FILES_H_
