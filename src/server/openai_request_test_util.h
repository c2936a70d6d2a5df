// Helpers of the OpenAI request parser's tests (openai_request_test.cc, modular_request_test.cc):
// a body parsed as a chat or completion request that must succeed, or the error it must give.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "server/openai_request.h"

namespace promptcache {

inline ApiRequest Chat(const std::string& body, RequestLimits limits = {}) {
  ApiRequest r;
  std::optional<ApiError> err = ParseChatRequest(body, limits, &r);
  EXPECT_FALSE(err.has_value()) << body << " -> " << (err ? err->message : "");
  return r;
}

inline ApiRequest Completion(const std::string& body, RequestLimits limits = {}) {
  ApiRequest r;
  std::optional<ApiError> err = ParseCompletionRequest(body, limits, &r);
  EXPECT_FALSE(err.has_value()) << body << " -> " << (err ? err->message : "");
  return r;
}

inline ApiError ChatError(const std::string& body, RequestLimits limits = {}) {
  ApiRequest r;
  std::optional<ApiError> err = ParseChatRequest(body, limits, &r);
  EXPECT_TRUE(err.has_value()) << body;
  return err.value_or(ApiError());
}

inline ApiError CompletionError(const std::string& body, RequestLimits limits = {}) {
  ApiRequest r;
  std::optional<ApiError> err = ParseCompletionRequest(body, limits, &r);
  EXPECT_TRUE(err.has_value()) << body;
  return err.value_or(ApiError());
}

}  // namespace promptcache
