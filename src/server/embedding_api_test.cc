// The embedding endpoints' parsing (every input shape OpenAI's and Ollama's accept, and the
// 400s for the others) and bodies (floats that read back exactly; base64 as Python's struct and
// base64 modules encode float32).
#include "server/embedding_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace promptcache {
namespace {

EmbeddingsApiRequest Parsed(const std::string& body, bool ollama = false) {
  EmbeddingsApiRequest r;
  std::optional<ApiError> err =
      ollama ? ParseOllamaEmbedRequest(body, &r) : ParseEmbeddingsRequest(body, &r);
  EXPECT_FALSE(err.has_value()) << body << ": " << err->message;
  return r;
}

// The 400's message contains `says` and names `param`.
void Refused(const std::string& body, const std::string& says, const std::string& param,
             bool ollama = false) {
  EmbeddingsApiRequest r;
  std::optional<ApiError> err =
      ollama ? ParseOllamaEmbedRequest(body, &r) : ParseEmbeddingsRequest(body, &r);
  ASSERT_TRUE(err.has_value()) << body;
  EXPECT_EQ(err->http_status, 400);
  EXPECT_NE(err->message.find(says), std::string::npos) << body << ": " << err->message;
  EXPECT_EQ(err->param, param) << body;
}

TEST(EmbeddingsRequest, EveryInputShape) {
  EmbeddingsApiRequest r = Parsed(R"({"input": "hello", "model": "m"})");
  EXPECT_EQ(r.texts, std::vector<std::string>{"hello"});
  EXPECT_FALSE(r.is_tokens);
  EXPECT_EQ(r.model, "m");
  EXPECT_FALSE(r.base64);
  r = Parsed(R"({"input": ["a", "b c"], "encoding_format": "base64", "user": "u"})");
  EXPECT_EQ(r.texts, (std::vector<std::string>{"a", "b c"}));
  EXPECT_TRUE(r.base64);
  EXPECT_EQ(r.model, "");
  r = Parsed(R"({"input": [1, 403, 407]})");
  EXPECT_TRUE(r.is_tokens);
  EXPECT_EQ(r.token_inputs, (std::vector<std::vector<int32_t>>{{1, 403, 407}}));
  r = Parsed(R"({"input": [[1, 2], [3]], "dimensions": 64, "encoding_format": "float"})");
  EXPECT_EQ(r.token_inputs, (std::vector<std::vector<int32_t>>{{1, 2}, {3}}));
  EXPECT_EQ(r.dimensions, 64);
  // Ollama: texts only, truncate (default true).
  r = Parsed(R"({"model": "x", "input": ["a"], "truncate": false, "options": {}})", true);
  EXPECT_EQ(r.texts, std::vector<std::string>{"a"});
  EXPECT_FALSE(r.truncate);
  EXPECT_TRUE(Parsed(R"({"input": "a", "keep_alive": "5m"})", true).truncate);
}

// (Mutation tried: the empty-string check removed lets {"input": ""} through and fails here.)
TEST(EmbeddingsRequest, BadInputsAreRefusedNamingTheField) {
  Refused(R"({"model": "m"})", "'input' is required", "input");
  Refused(R"({"input": ""})", "'input' must not be an empty string", "input");
  Refused(R"({"input": []})", "'input' must not be an empty array", "input");
  Refused(R"({"input": ["a", ""]})", "'input[1]' must not be an empty string", "input[1]");
  Refused(R"({"input": ["a", 3]})", "'input[1]' must be a string, not an integer", "input[1]");
  Refused(R"({"input": [[1], []]})", "'input[1]' must not be empty", "input[1]");
  Refused(R"({"input": [[1], "a"]})", "'input[1]' must be an array of token ids", "input[1]");
  Refused(R"({"input": [1, -2]})", "'input[1]' is -2, not a token id", "input[1]");
  Refused(R"({"input": [1, 4294967296]})", "'input[1]' is 4294967296, not a token id", "input[1]");
  Refused(R"({"input": [1, 2.5]})", "'input[1]' must be a token id (an integer), not a number",
          "input[1]");
  Refused(R"({"input": [{"a": 1}]})", "'input[0]' must be a string, a token id", "input[0]");
  Refused(R"({"input": 5})", "'input' must be a string, an array of strings", "input");
  Refused(R"({"input": "a", "encoding_format": "int8"})",
          "'encoding_format' is \"int8\", must be \"float\" or \"base64\"", "encoding_format");
  Refused(R"({"input": "a", "dimensions": 0})", "'dimensions' is 0", "dimensions");
  Refused(R"({"input": "a", "dimensions": "64"})", "'dimensions' must be an integer", "dimensions");
  Refused(R"({"input": "a", "model": 3})", "'model' must be a string", "model");
  std::string many = R"({"input": [)";
  for (int i = 0; i <= kMaxEmbeddingInputs; ++i) many += i == 0 ? "\"a\"" : ",\"a\"";
  Refused(many + "]}", "'input' has 2049 items; at most 2048", "input");
  // Fields neither API defines are refused by name, as on the other routes (null: not given).
  Refused(R"({"input": "a", "pooling": "last"})", "'pooling' is not supported", "pooling");
  Refused(R"({"input": "a", "truncate": true})", "'truncate' is not supported", "truncate");
  Refused(R"({"input": "a", "encoding_format": "float"})", "'encoding_format' is not supported",
          "encoding_format", true);
  EXPECT_EQ(Parsed(R"({"input": "a", "pooling": null})").texts.size(), 1u);
  Refused("[1]", "", "");
  Refused("{", "", "");
  // Ollama takes no token ids.
  Refused(R"({"input": [1, 2]})", "'input[0]' must be a string, not an integer", "input[0]", true);
  Refused(R"({"input": "a", "truncate": 1})", "'truncate' must be a boolean", "truncate", true);
}

TEST(EmbeddingsBody, Base64IsLittleEndianFloat32) {
  // Expected values from Python: base64.b64encode(struct.pack('<3f', 1.0, -2.5, 0.1)).
  EXPECT_EQ(Base64Floats({1.0f, -2.5f, 0.1f}), "AACAPwAAIMDNzMw9");
  EXPECT_EQ(Base64Floats({1.0f, -2.5f}), "AACAPwAAIMA=");
  EXPECT_EQ(Base64Floats({0.1f}), "zczMPQ==");
  EXPECT_EQ(Base64Floats({}), "");
}

// Every float reads back as the same float32 from the JSON text; usage counts the tokens.
TEST(EmbeddingsBody, OpenAiAndOllamaShapes) {
  EmbeddingResult r;
  r.embeddings = {{0.1f, -1e-30f, 3.4028235e38f, 1.17549435e-38f}, {0.333333343f, 0, -0.0f, 1}};
  r.prompt_tokens = 7;
  const nlohmann::json j = nlohmann::json::parse(EmbeddingsBody(r, "stories\"260K", false));
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "stories\"260K");
  EXPECT_EQ(j["usage"], (nlohmann::json{{"prompt_tokens", 7}, {"total_tokens", 7}}));
  ASSERT_EQ(j["data"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(j["data"][i]["object"], "embedding");
    EXPECT_EQ(j["data"][i]["index"], i);
    std::vector<float> back;
    for (const auto& x : j["data"][i]["embedding"]) back.push_back(float(x.get<double>()));
    EXPECT_EQ(back, r.embeddings[i]);
  }
  const nlohmann::json b = nlohmann::json::parse(EmbeddingsBody(r, "m", true));
  EXPECT_EQ(b["data"][1]["embedding"], Base64Floats(r.embeddings[1]));

  const nlohmann::json o = nlohmann::json::parse(OllamaEmbedBody(r, "m", 1234));
  EXPECT_EQ(o["model"], "m");
  EXPECT_EQ(o["total_duration"], 1234);
  EXPECT_EQ(o["load_duration"], 0);
  EXPECT_EQ(o["prompt_eval_count"], 7);
  EXPECT_EQ(o["embeddings"].size(), 2u);
  EXPECT_EQ(float(o["embeddings"][0][0].get<double>()), 0.1f);
  ApiError e = ApiError::BadRequest("no \"x\"", "input");
  EXPECT_EQ(nlohmann::json::parse(ErrorBody(ApiFlavour::kOllama, e)),
            (nlohmann::json{{"error", "no \"x\""}}));
}

}  // namespace
}  // namespace promptcache
