// The sampling fields of OpenAI-shaped requests (sampling_request.cc): llama-server's further
// samplers and DRY's breakers, read into SamplingParams, and their errors naming the field.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/openai_request.h"
#include "server/openai_request_test_util.h"

namespace promptcache {
namespace {

TEST(SamplingRequest, ReadsLlamaServersFurtherSamplers) {
  ApiRequest r = Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],
      "typical_p":0.9,"top_n_sigma":1.5,"xtc_probability":0.5,"xtc_threshold":0.2,
      "min_keep":3,"dynatemp_range":0.4,"dynatemp_exponent":2,"mirostat":2,
      "mirostat_tau":4.5,"mirostat_eta":0.2})");
  EXPECT_FLOAT_EQ(r.sampling.typical_p, 0.9f);
  EXPECT_FLOAT_EQ(r.sampling.top_n_sigma, 1.5f);
  EXPECT_FLOAT_EQ(r.sampling.xtc_probability, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.xtc_threshold, 0.2f);
  EXPECT_EQ(r.sampling.min_keep, 3);
  EXPECT_FLOAT_EQ(r.sampling.dynatemp_range, 0.4f);
  EXPECT_FLOAT_EQ(r.sampling.dynatemp_exponent, 2.0f);
  EXPECT_EQ(r.sampling.mirostat, 2);
  EXPECT_FLOAT_EQ(r.sampling.mirostat_tau, 4.5f);
  EXPECT_FLOAT_EQ(r.sampling.mirostat_eta, 0.2f);
  // llama-server's "off" values: typical_p 0 and a negative top_n_sigma.
  r = Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"typical_p":0,
      "top_n_sigma":-1})");
  EXPECT_FLOAT_EQ(r.sampling.typical_p, 1.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_n_sigma, -1.0f);
  r = Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"dry_multiplier":0.8,
      "dry_base":1.5,"dry_allowed_length":3,"dry_penalty_last_n":64,
      "dry_sequence_breakers":["\n","User:"]})");
  EXPECT_FLOAT_EQ(r.sampling.dry_multiplier, 0.8f);
  EXPECT_FLOAT_EQ(r.sampling.dry_base, 1.5f);
  EXPECT_EQ(r.sampling.dry_allowed_length, 3);
  EXPECT_EQ(r.sampling.dry_penalty_last_n, 64);
  EXPECT_EQ(r.dry_breakers, (std::vector<std::string>{"\n", "User:"}));
  // llama-server's default breakers when the request names none.
  r = Chat(R"({"model":"m","messages":[{"role":"user","content":"x"}],"dry_multiplier":0.8})");
  EXPECT_EQ(r.dry_breakers, (std::vector<std::string>{"\n", ":", "\"", "*"}));
  for (const char* bad : {R"("mirostat":3)", R"("typical_p":1.5)", R"("xtc_probability":-0.1)",
                          R"("min_keep":-1)", R"("mirostat_tau":"5")", R"("dry_base":0.5)",
                          R"("dry_penalty_last_n":-2)", R"("dry_sequence_breakers":"x")"}) {
    const std::string body =
        std::string(R"({"model":"m","messages":[{"role":"user","content":"x"}],)") + bad + "}";
    const ApiError e = ChatError(body);
    EXPECT_EQ(e.http_status, 400) << body;
    const std::string field = std::string(bad).substr(1, std::string(bad).find('"', 1) - 1);
    EXPECT_EQ(e.param, field) << body << ": " << e.message;
  }
}

TEST(SamplingRequest, DryBreakersAreShortStrings) {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"x"}],)";
  ApiError e = ChatError(head + R"("dry_sequence_breakers":["a",""]})");
  EXPECT_EQ(e.param, "dry_sequence_breakers[1]") << e.message;
  e = ChatError(head + R"("dry_sequence_breakers":["a",7]})");
  EXPECT_EQ(e.param, "dry_sequence_breakers[1]") << e.message;
  e = ChatError(head + R"("dry_sequence_breakers":[")" + std::string(65, 'x') + R"("]})");
  EXPECT_EQ(e.param, "dry_sequence_breakers[0]") << e.message;
  std::string many = "[";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + "\"b\"";
  e = ChatError(head + R"("dry_sequence_breakers":)" + many + "]}");
  EXPECT_EQ(e.param, "dry_sequence_breakers") << e.message;
}

}  // namespace
}  // namespace promptcache
