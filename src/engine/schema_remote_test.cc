// Registering a schema reads the remote tier off the engine thread (EngineImpl::EnsurePiece):
// engines on stories260K share an in-memory store whose reads of chosen keys wait on a latch the
// test opens (remote_test_util.h). While a registration's reads wait, another request runs to its
// end; the registration then reuses what the store had, as a replica holding the modules itself
// does, and its prompt answers as that replica's. A value that fails its checks, and a store too
// slow for the deadline, make misses that are encoded here. Nothing is timed: the waits are
// liveness bounds.
#include <gtest/gtest.h>

#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine_impl.h"
#include "engine/in_flight_test_util.h"
#include "engine/modular_test_util.h"
#include "engine/remote_test_util.h"

namespace promptcache {
namespace {

using in_flight_test::Ids;
using remote_test::kLiveness;
using remote_test::MakeEngine;
using remote_test::Options;
using remote_test::Store;
using remote_test::Submit;

// The story schema with its weather module's text changed: registered where the story's modules
// are cached, only that module is encoded, after the always-included text it attends to.
std::string Variant() {
  std::string xml = Slurp(kStorySchema);
  const std::string from = "The sun was warm and the sky was blue.";
  const size_t at = xml.find(from);
  PC_CHECK(at != std::string::npos);
  return xml.replace(at, from.size(), "The sun was hot and the sky was grey.");
}

// A prompt that includes the changed module.
const char* kWeather = R"(<prompt schema="story"><lily/><weather/><park/><![CDATA[
One day,]]></prompt>)";

CompletionResult Serve(Engine& e, const char* xml) {
  auto h = e.SubmitPml(xml, Greedy({}, 8));
  PC_CHECK(h.ok());
  PC_CHECK((*h)->WaitFor(kLiveness));
  return (*h)->Wait();
}

// A first replica registered the story schema, so the store holds its modules; `alone`, a
// replica with a store of its own, registered it too, then the variant: what the variant's
// registration encodes and reuses where the story's modules are at hand, and its answer to
// kWeather (the changed module encoded there).
struct SchemaCase {
  Store store, other;
  std::string variant = Variant();
  SchemaInfo story, want;
  CompletionResult ref;

  SchemaCase() {
    Result<SchemaInfo> s = MakeEngine(&store)->LoadSchemaFile(kStorySchema);
    PC_CHECK(s.ok());
    story = *s;
    auto alone = MakeEngine(&other);
    PC_CHECK(alone->LoadSchemaFile(kStorySchema).ok());
    Result<SchemaInfo> w = alone->LoadSchemaText(variant, "variant.xml");
    PC_CHECK(w.ok());
    want = *w;
    ref = Serve(*alone, kWeather);
    PC_CHECK(ref.status.ok());
  }
  // The store's names of the blocks of module `name`'s first piece, as `e` keys them.
  std::vector<std::string> ModuleNames(Engine& e, const std::string& name) {
    auto& impl = static_cast<EngineImpl&>(e);
    const std::shared_ptr<const SchemaLayout> layout = *e.GetSchemaLayout("story");
    std::vector<std::string> names;
    for (const PmlModule& m : layout->modules) {
      if (m.name != name) continue;
      for (const BlockKey& k : impl.modules()->PieceKeys(m.texts[0])) {
        names.push_back(impl.cache()->RemoteKeyOf({}, k));
      }
    }
    return names;
  }
};

// On a build that reads the store inside the registration's engine task (main before this test:
// EXISTS, then GET through BlockCache::AppendCached for the pieces the changed module is computed
// after), A cannot finish while those reads wait: this test then fails at A's wait.
TEST(SchemaRemote, ARegistrationsReadsWaitOffTheEngineThread) {
  SchemaCase c;
  ASSERT_GT(c.want.encoded_tokens, 0);
  ASSERT_LT(c.want.encoded_tokens, c.want.cached_tokens);
  auto e = MakeEngine(&c.store);
  ASSERT_TRUE(Submit(*e, Ids(40, 3))->Wait().status.ok());  // A's blocks now in RAM
  std::vector<std::string> names;  // every value in the store: the modules' and A's
  for (const auto& [name, value] : c.store.values) names.push_back(name);
  c.store.Hold(names);
  auto load = std::async(std::launch::async, [&] { return e->LoadSchemaText(c.variant, "v.xml"); });
  ASSERT_TRUE(c.store.WaitEntered(1)) << "the registration never read the store";
  auto a = Submit(*e, Ids(40, 3));
  const bool a_done = a->WaitFor(kLiveness);
  c.store.Open();
  ASSERT_TRUE(a_done) << "A did not finish while the registration's remote reads waited";
  EXPECT_TRUE(a->Wait().status.ok());
  ASSERT_EQ(load.wait_for(std::chrono::duration<double>(kLiveness)), std::future_status::ready);
  const Result<SchemaInfo> got = load.get();
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->encoded_tokens, c.want.encoded_tokens);
  EXPECT_EQ(got->reused_tokens, c.want.reused_tokens);
  EXPECT_GT(e->Stats().remote.loads, 0u);
  const CompletionResult r = Serve(*e, kWeather);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.encoded_tokens, 0);  // every module it gathers was in RAM
  EXPECT_EQ(r.cached_tokens, c.ref.cached_tokens);
  EXPECT_EQ(r.tokens, c.ref.tokens);
  std::lock_guard<std::mutex> lock(c.store.mu);
  EXPECT_FALSE(c.store.no_deadline);                                    // read under a budget
  for (const auto& [name, n] : c.store.asked) EXPECT_LE(n, 1) << name;  // each asked once at most
}

// The pieces a missing module is computed after are read from the store too, when RAM no longer
// holds them: with no RAM to keep unused blocks, each piece read for the registration is evicted
// after its turn, so the changed module's encoding needs the always-included text read again.
// Mutation: PlanPieceReads planning the piece's own blocks only encodes that text again (69
// tokens instead of 34).
TEST(SchemaRemote, WhatAMissingModuleIsComputedAfterIsReadFromTheStore) {
  SchemaCase c;
  EngineOptions o = Options();
  o.cache_ram_bytes = 1;
  auto e = MakeEngine(&c.store, o);
  const Result<SchemaInfo> got = e->LoadSchemaText(c.variant, "v.xml");
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->encoded_tokens, c.want.encoded_tokens);
  EXPECT_EQ(got->reused_tokens, c.want.reused_tokens);
  const CompletionResult r = Serve(*e, kWeather);  // its modules read from the store again
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.encoded_tokens, 0);
  EXPECT_EQ(r.tokens, c.ref.tokens);
}

// A module's block whose value fails its checks: that module is a miss (counted invalid) and is
// encoded here, the others are found in the store; the prompt answers as the replica that
// encoded everything itself. Mutation: counting a piece as found from the store's EXISTS (main's
// Ensure) reuses every token and encodes none.
TEST(SchemaRemote, AModuleWhoseValueFailsItsChecksIsEncoded) {
  SchemaCase c;
  auto e = MakeEngine(&c.store);
  Store own;
  auto writer = MakeEngine(&own);  // encodes them itself, keyed as any replica of this model
  ASSERT_TRUE(writer->LoadSchemaFile(kStorySchema).ok());
  const std::vector<std::string> lily = c.ModuleNames(*writer, "lily");
  ASSERT_GE(lily.size(), 2u);
  {
    std::lock_guard<std::mutex> lock(c.store.mu);
    std::string& v = c.store.values.at(lily[1]);
    v[v.size() / 2] ^= 0x55;
  }
  const Result<SchemaInfo> got = e->LoadSchemaFile(kStorySchema);
  ASSERT_TRUE(got.ok()) << got.status().message();
  const std::shared_ptr<const SchemaLayout> layout = *e->GetSchemaLayout("story");
  int lily_tokens = 0;
  for (const PmlModule& m : layout->modules) {
    if (m.name == "lily") lily_tokens = static_cast<int>(m.texts[0].tokens.size());
  }
  EXPECT_EQ(got->encoded_tokens, lily_tokens);
  EXPECT_EQ(got->reused_tokens, c.story.encoded_tokens - lily_tokens);
  EXPECT_EQ(e->Stats().remote.invalid, 1u);
  const CompletionResult want = Serve(*writer, kLily);
  const CompletionResult r = Serve(*e, kLily);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_EQ(r.encoded_tokens, 0);
  EXPECT_EQ(r.tokens, want.tokens);
}

// A store slower than the deadline: each piece's reads end at it, and every piece is encoded
// here, as with no store at all; the prompt answers as the replica that encoded them itself.
TEST(SchemaRemote, AStoreSlowerThanTheDeadlineMakesEveryPieceAMiss) {
  SchemaCase c;
  auto e = MakeEngine(&c.store, Options(/*deadline_ms=*/50));
  std::vector<std::string> names;
  for (const auto& [name, value] : c.store.values) names.push_back(name);
  c.store.Hold(names);  // never opened
  const Result<SchemaInfo> got = e->LoadSchemaFile(kStorySchema);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(got->encoded_tokens, c.story.encoded_tokens);
  EXPECT_EQ(got->reused_tokens, 0);
  EXPECT_GT(e->Stats().remote.deadline_misses, 0u);
  Store own;
  auto writer = MakeEngine(&own);
  ASSERT_TRUE(writer->LoadSchemaFile(kStorySchema).ok());
  EXPECT_EQ(Serve(*e, kLily).tokens, Serve(*writer, kLily).tokens);
  std::lock_guard<std::mutex> lock(c.store.mu);
  EXPECT_FALSE(c.store.no_deadline);
}

}  // namespace
}  // namespace promptcache
