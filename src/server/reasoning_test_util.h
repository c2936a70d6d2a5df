// The streaming check the reasoning and harmony tests share: a ReasoningSplitter fed any cut of
// a text gives the split of the whole (reasoning, content, where the reasoning ends).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "server/reasoning.h"

namespace promptcache {

// Every way of cutting `text` into three pieces (the second cut every `step` bytes after the
// first) streams to the same split as the whole.
inline void ExpectStreamMatchesWhole(ReasoningMode mode, const std::string& text, size_t step = 1) {
  const ReasoningSplit whole = SplitReasoning(mode, text);
  for (size_t i = 0; i <= text.size(); ++i) {
    for (size_t j = i; j <= text.size(); j += step) {
      ReasoningSplitter s(mode);
      std::string reasoning, content;
      for (std::string_view piece :
           {std::string_view(text).substr(0, i), std::string_view(text).substr(i, j - i),
            std::string_view(text).substr(j)}) {
        ReasoningSplitter::Delta d = s.Add(piece);
        reasoning += d.reasoning;
        content += d.content;
      }
      const size_t end = s.reasoning_end();
      ReasoningSplitter::Delta d = s.Finish();
      reasoning += d.reasoning;
      content += d.content;
      ASSERT_EQ(reasoning, whole.reasoning) << text << " cut at " << i << ", " << j;
      ASSERT_EQ(content, whole.content) << text << " cut at " << i << ", " << j;
      ASSERT_EQ(s.has_reasoning(), whole.has_reasoning) << text;
      ASSERT_EQ(end, whole.reasoning_end) << text << " cut at " << i << ", " << j;
    }
  }
}

}  // namespace promptcache
