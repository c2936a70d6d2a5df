// The valid request bodies routes_fuzz starts from, a few per route: each input is spliced into
// them (fuzzing::ExerciseAsIsAndSpliced), and routes_seed_gen writes them as its seeds. Their
// numbers lie near the bounds they are checked against (max_tokens 200 against 256, 3000 against
// 4096, max_prompt 16 against 16): one digit overwritten, or the number doubled or halved (as
// libFuzzer's ChangeASCIIInteger does), crosses the bound.
#pragma once

namespace promptcache::fuzzing::routes {

constexpr const char* kResponsesBodies[] = {
    R"({"model":"m","input":"Once upon a time","instructions":"Tell stories.","max_output_tokens":3000,"temperature":0.7,"top_p":0.9,"store":false,"stream":true,"metadata":{"k":"v"},"truncation":"disabled","text":{"format":{"type":"json_object"}}})",
    R"({"input":[{"role":"user","content":[{"type":"input_text","text":"w?"}]},{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},{"type":"function_call_output","call_id":"call_1","output":"sunny"}],"tools":[{"type":"function","name":"get_weather","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}],"tool_choice":"auto"})",
    R"({"input":[{"type":"message","role":"developer","content":"x"},{"role":"assistant","content":[{"type":"output_text","text":"y","annotations":[]}]}],"text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object","properties":{"a":{"type":"integer"}}},"strict":true},"verbosity":"low"},"previous_response_id":"resp_1","seed":3,"top_k":5})",
    R"({"input":[{"role":"user","content":[{"type":"input_text","text":"d","prompt_cache_breakpoint":{"mode":"explicit"}}]},{"type":"reasoning","summary":[],"encrypted_content":"promptcache.reasoning.v1:VGhpbms="},{"role":"assistant","content":"a"}],"include":["reasoning.encrypted_content"],"reasoning":{"summary":"auto"},"prompt_cache_options":{"ttl":"30m"},"store":false})",
    R"({"input":"hi","text":{"format":{"type":"text"}},"tool_choice":{"type":"function","name":"f"},"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"include":[],"reasoning":{},"background":false,"top_logprobs":0,"user":"u"})",
    R"({"input":"hi","include":["message.output_text.logprobs","reasoning.encrypted_content"],"top_logprobs":3,"stream":true})",
};

constexpr const char* kOllamaChatBodies[] = {
    R"({"model":"m","messages":[{"role":"system","content":"You tell stories."},{"role":"user","content":"A cat."}],"stream":false,"keep_alive":"5m","options":{"temperature":0.5,"top_p":0.9,"top_k":7,"min_p":0.05,"seed":3,"num_predict":3000,"stop":["x"],"repeat_penalty":1.1,"repeat_last_n":64,"presence_penalty":0.1,"frequency_penalty":0.2,"num_ctx":4096}})",
    R"({"model":"m","messages":[{"role":"user","content":"w?"},{"role":"assistant","content":"","tool_calls":[{"function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},{"role":"tool","tool_name":"get_weather","content":"sunny"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"format":"json","think":false})",
    R"({"model":"m","messages":[{"role":"user","content":"x","images":[]}],"format":{"type":"object","properties":{"a":{"type":"string","maxLength":3}},"required":["a"]},"options":{"num_predict":-1}})",
};

constexpr const char* kOllamaGenerateBodies[] = {
    R"({"model":"m","prompt":"Once upon a time","system":"Tell stories.","stream":false,"options":{"num_predict":1000,"temperature":0,"stop":["\n"]},"keep_alive":0})",
    R"({"model":"m","prompt":"Once upon a time","raw":true,"format":"json","images":[],"suffix":"","context":[],"options":{"num_predict":-2,"seed":1}})",
    R"({"model":"m","prompt":"","think":false})",
    R"({"model":"m","prompt":"a\n\n---\n\nb","logprobs":true,"top_logprobs":20,"cache_segments":true,"recompute":0.5,"stream":false})",
};

constexpr const char* kEmbeddingsBodies[] = {
    R"({"model":"m","input":["Once upon a time","a cat"],"encoding_format":"base64","dimensions":64,"user":"u"})",
    R"({"input":[[1,403,407],[261,378]],"encoding_format":"float"})",
    R"({"input":[1,2,3]})",
};

constexpr const char* kOllamaEmbedBodies[] = {
    R"({"model":"m","input":["Once upon a time","a cat"],"truncate":false,"dimensions":64,"options":{"num_ctx":8},"keep_alive":"1m"})",
    R"({"model":"m","input":"one text"})",
};

constexpr const char* kSavingsBodies[] = {
    R"({"max_tokens":200,"max_prompt":3000})",
    R"({"max_prompt":16})",
};

constexpr const char* kSchemaBodies[] = {
    R"(<schema name="s"><module name="m">text</module></schema>)",
    R"({"schema":"<schema name=\"s\"><module name=\"m\">text</module></schema>"})",
};

}  // namespace promptcache::fuzzing::routes
