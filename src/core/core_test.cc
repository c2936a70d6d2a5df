#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "core/base64.h"
#include "core/enum_names.h"
#include "core/fp16.h"
#include "core/hash.h"
#include "core/marked_text.h"
#include "core/status.h"
#include "core/stop_thread.h"

namespace promptcache {
namespace {

enum class Fruit { kApple = -1, kPear, kPlum };
constexpr EnumName<Fruit> kFruitNames[] = {
    {Fruit::kApple, "apple"}, {Fruit::kPear, "pear"}, {Fruit::kPlum, "plum"}};
static_assert(NamesEach(kFruitNames, Fruit::kApple, Fruit::kPlum));
static_assert(NameOf(kFruitNames, Fruit::kPlum, "?")[1] == 'l');  // usable in constant expressions

// RFC 4648's test vectors (section 10), every byte value through a round trip, and what is not
// base64.
TEST(Base64, Rfc4648VectorsAndRoundTrip) {
  const std::pair<const char*, const char*> kVectors[] = {{"", ""},
                                                          {"f", "Zg=="},
                                                          {"fo", "Zm8="},
                                                          {"foo", "Zm9v"},
                                                          {"foob", "Zm9vYg=="},
                                                          {"fooba", "Zm9vYmE="},
                                                          {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : kVectors) {
    EXPECT_EQ(Base64Encode(plain), encoded);
    EXPECT_EQ(Base64Decode(encoded), std::string(plain));
  }
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += 37) {
    EXPECT_EQ(Base64Decode(Base64Encode(all.substr(0, n))), all.substr(0, n)) << n;
  }
  for (const char* bad : {"Zg=", "Zg", "Z===", "Zm9v!A==", "Zg==Zg==", "Zm=v", "=Zm9"}) {
    EXPECT_FALSE(Base64Decode(bad).has_value()) << bad;
  }
}

TEST(EnumNames, NamesValuesBothWaysWithTheSitesFallback) {
  for (const auto& [fruit, name] : kFruitNames) {
    EXPECT_STREQ(NameOf(kFruitNames, fruit, "?"), name);
    EXPECT_EQ(ValueOf(kFruitNames, name), fruit);
  }
  EXPECT_STREQ(NameOf(kFruitNames, Fruit{7}, "unknown"), "unknown");
  constexpr EnumName<Fruit> kSome[] = {{Fruit::kPear, "pear"}};
  EXPECT_STREQ(NameOf(kSome, Fruit::kApple, ""), "");
  EXPECT_EQ(ValueOf(kFruitNames, "plums"), std::nullopt);
  EXPECT_EQ(ValueOf(kFruitNames, "pea"), std::nullopt);
  EXPECT_EQ(ValueOf(kFruitNames, ""), std::nullopt);
}

// NamesEach refuses a table that misses a value, names one twice, or names one outside the range.
TEST(EnumNames, NamesEachWantsEveryValueOnce) {
  constexpr EnumName<Fruit> kMissing[] = {{Fruit::kApple, "apple"}, {Fruit::kPlum, "plum"}};
  constexpr EnumName<Fruit> kTwice[] = {
      {Fruit::kApple, "apple"}, {Fruit::kPear, "pear"}, {Fruit::kPear, "pear2"}};
  constexpr EnumName<Fruit> kOutside[] = {
      {Fruit::kApple, "apple"}, {Fruit::kPear, "pear"}, {Fruit{2}, "fig"}};
  EXPECT_TRUE(NamesEach(kFruitNames, Fruit::kApple, Fruit::kPlum));
  EXPECT_FALSE(NamesEach(kFruitNames, Fruit::kPear, Fruit::kPlum));  // one too many
  EXPECT_FALSE(NamesEach(kFruitNames, Fruit::kPlum, Fruit::kApple));
  EXPECT_FALSE(NamesEach(kMissing, Fruit::kApple, Fruit::kPlum));
  EXPECT_FALSE(NamesEach(kTwice, Fruit::kApple, Fruit::kPlum));
  EXPECT_FALSE(NamesEach(kOutside, Fruit::kApple, Fruit::kPlum));
}

TEST(Fp16, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), h) << h;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(F16ToF32(F32ToF16(1.0f)), 1.0f);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);                    // rounds up to infinity
  EXPECT_EQ(F32ToF16(1.0f + 1.0f / 2048), F32ToF16(1.0f));  // tie to even
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 1);            // smallest subnormal
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -26)), 0);
  EXPECT_EQ(BF16ToF32(F32ToBF16(3.140625f)), 3.140625f);
}

TEST(Hash, StableAndLengthPrefixed) {
  Hasher128 a, b;
  a.Update(std::string_view("ab"));
  a.Update(std::string_view("c"));
  b.Update(std::string_view("a"));
  b.Update(std::string_view("bc"));
  EXPECT_NE(a.HexDigest(), b.HexDigest());
  EXPECT_EQ(a.HexDigest().size(), 32u);
  EXPECT_EQ(Hash64("x", 1), Hash64("x", 1));
}

// Disk tier file names and module keys are these digests: a change of hash function, seed or
// framing would orphan every cache on disk, so the values are pinned (XXH3 from libxxhash).
TEST(Hash, DigestsArePinned) {
  EXPECT_EQ(Hash64("promptcache", 11), 0xc58bd2791607c5f2ULL);
  Hasher128 h;
  h.Update(std::string_view("promptcache"));
  EXPECT_EQ(h.HexDigest(), "3eea3dc3b6aa679f438abe99fca969d8");
}

TEST(MarkedText, TracksWhoWroteEachByte) {
  MarkedText t = MarkedText::Trusted("<a>");
  t.AppendUser("xy");
  t.AppendUser("z");  // adjacent user pieces merge
  t.AppendTrusted("<b>");
  MarkedText tail = MarkedText::User("w");
  tail.AppendTrusted("!");
  t.Append(tail);
  EXPECT_EQ(t.text(), "<a>xyz<b>w!");
  using Ranges = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(t.user_ranges(), (Ranges{{3, 6}, {9, 10}}));
  EXPECT_TRUE(t.IsTrusted(0, 3));
  EXPECT_FALSE(t.IsTrusted(2, 4));  // straddles into user text
  EXPECT_FALSE(t.IsTrusted(5, 7));
  EXPECT_TRUE(t.IsTrusted(6, 9));
  EXPECT_FALSE(t.IsTrusted(6, 10));
  EXPECT_TRUE(t.IsTrusted(10, 11));
  t.Truncate(5);
  EXPECT_EQ(t.text(), "<a>xy");
  EXPECT_EQ(t.user_ranges(), (Ranges{{3, 5}}));
  t.Truncate(3);
  EXPECT_TRUE(t.user_ranges().empty());
}

// Value and error in two tests: in one body, GCC 12 at -O2 warns that the value's Result may
// destroy an uninitialized Status (-Wmaybe-uninitialized, a false positive in std::variant).
TEST(Status, ResultCarriesValue) {
  Result<int> good = 5;
  EXPECT_TRUE(good.ok());
  EXPECT_EQ(*good, 5);
}

TEST(Status, ResultCarriesError) {
  Result<int> bad = InvalidArgument("nope");
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "nope");
  EXPECT_EQ(bad.status().WithContext("file").message(), "file: nope");
}

// A worker asleep on its condition variable until told to stop is woken and joined. (Mutation
// tried: StopAndJoin without notify_all leaves the worker asleep and `stopped` unset here.)
TEST(StopAndJoin, WakesASleepingWorkerAndJoinsIt) {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::promise<void> asleep;
  std::thread worker([&] {
    std::unique_lock<std::mutex> lock(mu);
    asleep.set_value();
    cv.wait(lock, [&] { return stop; });
  });
  asleep.get_future().wait();
  // Run on a thread of its own, so that a worker never woken fails the test instead of hanging it.
  std::promise<void> stopped;
  std::thread stopper([&] {
    StopAndJoin(mu, stop, cv, worker);
    stopped.set_value();
  });
  const bool woken =
      stopped.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  EXPECT_TRUE(woken) << "the worker was never woken";
  if (!woken) cv.notify_all();  // so that the test ends
  stopper.join();
  EXPECT_FALSE(worker.joinable());
  std::atomic<bool> atomic_stop{false};  // the flag may be atomic too (FidelitySampler's)
  std::thread idle([&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return atomic_stop.load(); });
  });
  StopAndJoin(mu, atomic_stop, cv, idle);
  EXPECT_TRUE(atomic_stop);
}

}  // namespace
}  // namespace promptcache
