// What the CLI tests share (cli_test.cc, cli_quantize_test.cc): running the promptcache binary
// as a user does and reading what it printed, the one-line error check every bad-input test
// makes, and a fixture with a scratch folder and stories260K variants with one thing changed.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/check.h"
#include "gguf/gguf.h"

namespace promptcache {

inline const std::string kBin = std::string(PC_BINARY_DIR) + "/promptcache";
inline const std::string kStories = std::string(PC_SHARED_DIR) + "/models/stories260K.gguf";

struct Output {
  int code;
  std::string out, err;
};

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline Output RunCli(const std::string& args) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string out = (dir / ("pc_cli_out_" + std::to_string(getpid()))).string();
  const std::string err = (dir / ("pc_cli_err_" + std::to_string(getpid()))).string();
  const std::string cmd = "timeout 60 " + kBin + " " + args + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  Output o{WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(out), Slurp(err)};
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return o;
}

// The last line of `out` (bench --json's object), without its newline.
inline std::string LastLine(std::string out) {
  if (!out.empty() && out.back() == '\n') out.pop_back();
  const size_t start = out.rfind('\n');
  return start == std::string::npos ? out : out.substr(start + 1);
}

// A bad-input run: exit code 1, and stderr ends with exactly one error line that mentions
// `needle` (progress logs may come before it).
inline void ExpectOneLineError(const std::string& args, const std::string& needle) {
  const Output o = RunCli(args);
  EXPECT_EQ(o.code, 1) << args << "\n" << o.err;
  ASSERT_FALSE(o.err.empty()) << args;
  EXPECT_EQ(o.err.back(), '\n');
  const size_t start = o.err.rfind('\n', o.err.size() - 2);
  const std::string last = o.err.substr(start == std::string::npos ? 0 : start + 1);
  EXPECT_EQ(last.rfind("promptcache: error: ", 0), 0u) << args << "\n" << o.err;
  EXPECT_NE(last.find(needle), std::string::npos) << args << "\n" << o.err;
  size_t errors = 0;
  for (size_t p = 0; (p = o.err.find("error", p)) != std::string::npos; ++p) ++errors;
  EXPECT_EQ(errors, 1u) << args << "\n" << o.err;
  EXPECT_TRUE(o.out.empty()) << args;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("pc_cli_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string WriteFile(const std::string& name, const std::string& data) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << data;
    return p;
  }

  // A copy of stories260K with one metadata value or one tensor's type changed.
  std::string Variant(const std::string& name, const std::function<void(GgufWriter&)>& edit,
                      GgmlType embd_type = GgmlType::kF32, const std::string& source = kStories) {
    auto src = GgufFile::Open(source);
    PC_CHECK(src.ok());
    GgufWriter w;
    for (const auto& [k, v] : (*src)->metadata()) w.SetValue(k, v);
    for (const GgufTensorInfo& t : (*src)->tensors()) {
      const bool retype = t.name == "token_embd.weight" && embd_type != GgmlType::kF32;
      const GgmlType type = retype ? embd_type : t.type;
      const GgufTensorInfo* info = &t;
      w.AddTensor(t.name, t.dims, type, [info, retype](uint8_t* dst, size_t n) {
        if (retype) {
          std::memset(dst, 0, n);
        } else {
          std::memcpy(dst, info->data, n);
        }
      });
    }
    edit(w);
    const std::string p = (dir_ / name).string();
    const Status st = w.Write(p);
    EXPECT_TRUE(st.ok()) << st.message();
    sources_.push_back(std::move(src).value());
    return p;
  }

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<GgufFile>> sources_;
};

}  // namespace promptcache
