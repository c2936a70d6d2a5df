#include "engine/chat_template.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace promptcache {
namespace {

// `tokenizer.chat_template` texts of real models, as stored in GGUF files (the JSON-decoded
// tokenizer_config.json value). Some spell a newline inside a Jinja string literal as a real
// newline, others as the escape "\n": the raw strings below keep the latter form.

// HuggingFaceTB/SmolLM2-*-Instruct.
constexpr char kSmolLm2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

// Qwen/Qwen2-*-Instruct.
constexpr char kQwen2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif "
    "%}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

// Qwen/Qwen2.5-*-Instruct, abridged: the tool-call branches of the message loop are left out.
constexpr char kQwen25[] = R"({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)";

// teknium/OpenHermes-2.5-Mistral-7B: ChatML without a default system prompt.
constexpr char kOpenHermes[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

// meta-llama/Meta-Llama-3-8B-Instruct.
constexpr char kLlama3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

// meta-llama/Llama-3.1-8B-Instruct, abridged to its system-turn header and message loop.
constexpr char kLlama31[] = R"({{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)";

// meta-llama/Llama-2-7b-chat-hf.
constexpr char kLlama2[] =
    R"({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})";

// HuggingFaceH4/zephyr-7b-beta (TinyLlama/TinyLlama-1.1B-Chat-v1.0 uses the same).
constexpr char kZephyr[] =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
    "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ "
    "'<|system|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == "
    "'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% "
    "if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

// mistralai/Mistral-7B-Instruct-v0.2: [INST] without <<SYS>>.
constexpr char kMistral[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ "
    "'[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ "
    "message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant "
    "roles are supported!') }}{% endif %}{% endfor %}";

// microsoft/Phi-3-mini-4k-instruct: <|user|> like Zephyr, but turns end with <|end|>.
constexpr char kPhi3[] =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') "
    "%}{{'<|user|>' + '\n' + message['content'] + '<|end|>' + '\n' + '<|assistant|>' + "
    "'\n'}}{% elif (message['role'] == 'assistant') %}{{message['content'] + '<|end|>' + "
    "'\n'}}{% endif %}{% endfor %}";

// google/gemma-7b-it.
constexpr char kGemma[] =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
    "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') "
    "%}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ "
    "'<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor "
    "%}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";

const std::vector<ChatMessage> kThree = {
    {"system", "You are a helpful assistant."},
    {"user", "Hello! Who are you?"},
    {"assistant", "I am an AI assistant."},
};

// Whitespace around contents, and a conversation that ends with the user.
const std::vector<ChatMessage> kSpaced = {
    {"system", " Be brief. "},
    {"user", "Hi\n"},
    {"assistant", "  Hello there.  "},
    {"user", "Name a colour."},
};

std::string Render(ChatFormat format, const std::vector<ChatMessage>& messages, bool gen,
                   std::string_view bos, std::string_view eos, bool leading_bos = false) {
  Result<std::string> r = RenderChat(format, messages, gen, bos, eos, leading_bos);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : "";
}

// Every expected string below is what transformers' Jinja rendering of the template above
// produces (trim_blocks and lstrip_blocks on) for the same messages and special tokens.

TEST(RenderChat, ChatMl) {
  const std::string three =
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
      "<|im_start|>user\nHello! Who are you?<|im_end|>\n"
      "<|im_start|>assistant\nI am an AI assistant.<|im_end|>\n";
  EXPECT_EQ(Render(ChatFormat::kChatMl, kThree, false, "", "<|im_end|>"), three);
  EXPECT_EQ(Render(ChatFormat::kChatMl, kThree, true, "", "<|im_end|>"),
            three + "<|im_start|>assistant\n");
  EXPECT_EQ(Render(ChatFormat::kChatMl, kSpaced, true, "", "<|im_end|>"),
            "<|im_start|>system\n Be brief. <|im_end|>\n<|im_start|>user\nHi\n<|im_end|>\n"
            "<|im_start|>assistant\n  Hello there.  <|im_end|>\n"
            "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n");
  // ChatML templates never write BOS.
  EXPECT_EQ(Render(ChatFormat::kChatMl, kThree, false, "<s>", "</s>", true), three);
}

TEST(RenderChat, ChatMlWithTheTemplatesDefaultSystemPrompt) {
  std::vector<ChatMessage> messages = {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
  const std::string prompt = DefaultSystemPrompt(kSmolLm2);
  ASSERT_FALSE(prompt.empty());
  messages.insert(messages.begin(), {"system", prompt});
  EXPECT_EQ(Render(ChatFormat::kChatMl, messages, true, "", "<|im_end|>"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
            "Hello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
}

TEST(RenderChat, Llama3) {
  const std::string three =
      "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHello! Who are you?<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nI am an AI assistant.<|eot_id|>";
  const std::string bos = "<|begin_of_text|>";
  EXPECT_EQ(Render(ChatFormat::kLlama3, kThree, false, bos, "<|eot_id|>", true), bos + three);
  EXPECT_EQ(Render(ChatFormat::kLlama3, kThree, true, bos, "<|eot_id|>", true),
            bos + three + "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // By default the leading BOS is the tokenizer's job.
  EXPECT_EQ(Render(ChatFormat::kLlama3, kThree, false, bos, "<|eot_id|>"), three);
  // Contents are trimmed.
  EXPECT_EQ(Render(ChatFormat::kLlama3, kSpaced, true, bos, "<|eot_id|>", true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello there.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nName a colour.<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(RenderChat, Llama2) {
  const std::string three =
      "[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! Who are you? [/INST] I "
      "am an AI assistant. </s>";
  EXPECT_EQ(Render(ChatFormat::kLlama2, kThree, false, "<s>", "</s>", true), "<s>" + three);
  // The official template has no generation prompt: the model answers after " [/INST]".
  EXPECT_EQ(Render(ChatFormat::kLlama2, kThree, true, "<s>", "</s>", true), "<s>" + three);
  EXPECT_EQ(Render(ChatFormat::kLlama2, kThree, true, "<s>", "</s>"), three);
  // Later user turns carry their own BOS; the system text keeps its spaces, turns are trimmed.
  EXPECT_EQ(Render(ChatFormat::kLlama2, kSpaced, true, "<s>", "</s>"),
            "[INST] <<SYS>>\n Be brief. \n<</SYS>>\n\nHi [/INST] Hello there. </s>"
            "<s>[INST] Name a colour. [/INST]");
  const std::vector<ChatMessage> no_system = {
      {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
  EXPECT_EQ(Render(ChatFormat::kLlama2, no_system, true, "<s>", "</s>", true),
            "<s>[INST] Hi [/INST] Hello </s><s>[INST] Bye [/INST]");
}

TEST(RenderChat, Zephyr) {
  const std::string three =
      "<|system|>\nYou are a helpful assistant.</s>\n<|user|>\nHello! Who are you?</s>\n"
      "<|assistant|>\nI am an AI assistant.</s>\n";
  EXPECT_EQ(Render(ChatFormat::kZephyr, kThree, false, "<s>", "</s>"), three);
  EXPECT_EQ(Render(ChatFormat::kZephyr, kThree, true, "<s>", "</s>", true),
            three + "<|assistant|>\n");
  EXPECT_EQ(Render(ChatFormat::kZephyr, kSpaced, true, "<s>", "</s>"),
            "<|system|>\n Be brief. </s>\n<|user|>\nHi\n</s>\n<|assistant|>\n  Hello there.  </s>\n"
            "<|user|>\nName a colour.</s>\n<|assistant|>\n");
}

TEST(RenderChat, Plain) {
  EXPECT_EQ(Render(ChatFormat::kPlain, kThree, false, "", ""),
            "System: You are a helpful assistant.\nUser: Hello! Who are you?\n"
            "Assistant: I am an AI assistant.\n");
  EXPECT_EQ(Render(ChatFormat::kPlain, {{"user", "2+2?"}}, true, "<s>", "</s>", true),
            "User: 2+2?\nAssistant:");
}

TEST(RenderChat, RejectsBadConversations) {
  for (ChatFormat f : {ChatFormat::kChatMl, ChatFormat::kLlama3, ChatFormat::kLlama2,
                       ChatFormat::kZephyr, ChatFormat::kPlain}) {
    Result<std::string> empty = RenderChat(f, {}, true, "<s>", "</s>");
    ASSERT_FALSE(empty.ok());
    EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
    Result<std::string> tool = RenderChat(f, {{"user", "x"}, {"tool", "{}"}}, true, "<s>", "</s>");
    ASSERT_FALSE(tool.ok());
    EXPECT_EQ(tool.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(tool.status().message().find("\"tool\""), std::string::npos);
    EXPECT_NE(tool.status().message().find("message 1"), std::string::npos);
  }
  // Llama-2 needs user/assistant alternation after an optional leading system message.
  const std::vector<std::vector<ChatMessage>> not_alternating = {
      {{"assistant", "Hi"}},
      {{"user", "a"}, {"user", "b"}},
      {{"user", "a"}, {"system", "b"}},
      {{"system", "s"}},
  };
  for (const auto& messages : not_alternating) {
    EXPECT_FALSE(RenderChat(ChatFormat::kLlama2, messages, true, "<s>", "</s>").ok());
    EXPECT_TRUE(RenderChat(ChatFormat::kChatMl, messages, true, "", "").ok());
  }
  EXPECT_FALSE(RenderChat(ChatFormat::kLlama2, kThree, true, "", "</s>").ok());
  EXPECT_FALSE(RenderChat(ChatFormat::kZephyr, kThree, true, "<s>", "").ok());
}

TEST(DetectChatFormat, RecognisesRealTemplates) {
  struct Case {
    const char* name;
    const char* text;
    ChatFormat format;
    bool guessed;
  };
  const Case cases[] = {
      {"SmolLM2", kSmolLm2, ChatFormat::kChatMl, false},
      {"Qwen2", kQwen2, ChatFormat::kChatMl, false},
      {"Qwen2.5", kQwen25, ChatFormat::kChatMl, false},
      {"OpenHermes", kOpenHermes, ChatFormat::kChatMl, false},
      {"Llama-3", kLlama3, ChatFormat::kLlama3, false},
      {"Llama-3.1", kLlama31, ChatFormat::kLlama3, false},
      {"Llama-2", kLlama2, ChatFormat::kLlama2, false},
      {"Zephyr", kZephyr, ChatFormat::kZephyr, false},
      {"Mistral", kMistral, ChatFormat::kLlama2, true},
      {"Phi-3", kPhi3, ChatFormat::kPlain, true},
      {"Gemma", kGemma, ChatFormat::kPlain, true},
      {"empty", "", ChatFormat::kPlain, false},
      {"blank", " \n", ChatFormat::kPlain, false},
      {"unknown", "{{ messages | join('\\n') }}", ChatFormat::kPlain, true},
  };
  for (const Case& c : cases) {
    bool guessed = !c.guessed;
    EXPECT_EQ(DetectChatFormat(c.text, &guessed), c.format) << c.name;
    EXPECT_EQ(guessed, c.guessed) << c.name;
    EXPECT_EQ(DetectChatFormat(c.text), c.format) << c.name;  // the out-parameter is optional
  }
}

TEST(DefaultSystemPrompt, FoundOnlyWhereTheTemplateInsertsOne) {
  EXPECT_EQ(DefaultSystemPrompt(kSmolLm2),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(DefaultSystemPrompt(kQwen2), "You are a helpful assistant.");
  // Escaped-newline spelling; the '<|im_start|>system\n' + messages[0]... literal is skipped.
  EXPECT_EQ(DefaultSystemPrompt(kQwen25),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(DefaultSystemPrompt(kOpenHermes), "");
  EXPECT_EQ(DefaultSystemPrompt(kLlama3), "");
  EXPECT_EQ(DefaultSystemPrompt(kZephyr), "");
  EXPECT_EQ(DefaultSystemPrompt(""), "");
  EXPECT_EQ(DefaultSystemPrompt(R"({{ "<|im_start|>system\nIt\'s \"fine\"\ttoday<|im_end|>\n" }})"),
            "It's \"fine\"\ttoday");
}

TEST(ChatFormatName, RoundTripsThroughParse) {
  for (ChatFormat f : {ChatFormat::kChatMl, ChatFormat::kLlama3, ChatFormat::kLlama2,
                       ChatFormat::kZephyr, ChatFormat::kPlain}) {
    Result<ChatFormat> parsed = ParseChatFormat(ChatFormatName(f));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, f);
  }
  EXPECT_EQ(ChatFormatName(ChatFormat::kChatMl), "chatml");
  Result<ChatFormat> bad = ParseChatFormat("vicuna");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("vicuna"), std::string::npos);
  EXPECT_NE(bad.status().message().find("llama3"), std::string::npos);
}

}  // namespace
}  // namespace promptcache
