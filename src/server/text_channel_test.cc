#include "server/text_channel.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace promptcache {
namespace {

using std::chrono::milliseconds;

TEST(TextChannel, TextComesBeforeTheEnd) {
  TextChannel ch;
  EXPECT_TRUE(ch.Push("a"));
  EXPECT_TRUE(ch.Push("b"));
  CompletionResult r;
  r.text = "ab";
  r.finish_reason = "stop";
  ch.Finish(r);
  std::vector<std::string> pieces;
  CompletionResult got;
  ASSERT_EQ(ch.Next(milliseconds(0), &pieces, &got), TextChannel::Event::kText);
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(ch.Next(milliseconds(0), &pieces, &got), TextChannel::Event::kFinished);
  EXPECT_EQ(got.text, "ab");
  EXPECT_EQ(got.finish_reason, "stop");
}

TEST(TextChannel, TimesOutWhenNothingArrives) {
  TextChannel ch;
  std::vector<std::string> pieces;
  CompletionResult got;
  EXPECT_EQ(ch.Next(milliseconds(5), &pieces, &got), TextChannel::Event::kTimeout);
}

TEST(TextChannel, CancelStopsTheWriter) {
  TextChannel ch;
  EXPECT_TRUE(ch.Push("a"));
  ch.Cancel();
  EXPECT_TRUE(ch.cancelled());
  EXPECT_FALSE(ch.Push("b"));
}

TEST(TextChannel, WakesTheReaderAcrossThreads) {
  TextChannel ch;
  std::thread writer([&] {
    for (int i = 0; i < 100; ++i) ch.Push(std::to_string(i));
    CompletionResult r;
    r.finish_reason = "length";
    ch.Finish(r);
  });
  std::string all;
  std::vector<std::string> pieces;
  CompletionResult got;
  for (;;) {
    const TextChannel::Event e = ch.Next(milliseconds(10000), &pieces, &got);
    ASSERT_NE(e, TextChannel::Event::kTimeout);
    if (e == TextChannel::Event::kFinished) break;
    for (const std::string& p : pieces) all += p + ",";
  }
  writer.join();
  std::string expected;
  for (int i = 0; i < 100; ++i) expected += std::to_string(i) + ",";
  EXPECT_EQ(all, expected);
  EXPECT_EQ(got.finish_reason, "length");
}

}  // namespace
}  // namespace promptcache
