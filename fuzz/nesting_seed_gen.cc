// Writes the seeds of nesting_fuzz into a folder: issue 28's hostile inputs and their neighbours,
// each prefixed by the byte that picks nesting_fuzz's target (0 a chat body, 1 a completion
// body, 2 GBNF, 3 a JSON schema, 4 a PML schema, 5 a PML prompt). They nest as deep as the
// issue's did (a JSON schema 100,000 levels deep, GBNF parentheses and repeats nested past their
// bounds, PML modules nested 100,000 deep), so that mutations start from the deep paths.
//   nesting_seed_gen SEED_DIR
#include <cstdio>
#include <fstream>
#include <string>

namespace {

std::string Repeat(const std::string& s, int n) {
  std::string out;
  out.reserve(s.size() * n);
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

std::string Nested(const std::string& open, const std::string& close, int n,
                   const std::string& leaf = "{}") {
  return Repeat(open, n) + leaf + Repeat(close, n);
}

std::string Chat(const std::string& extra) {
  return R"({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}])" +
         extra + "}";
}

std::string SchemaField(const std::string& schema) {
  return R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": )" +
         schema + "}}";
}

std::string Completion(const std::string& grammar_json) {
  return R"({"model": "m", "prompt": "x", "max_tokens": 1, "grammar": )" + grammar_json + "}";
}

std::string RepeatGrammar(int levels, int n) {
  std::string g = "\"a\"";
  for (int i = 0; i < levels; ++i) g = "(" + g + "{0," + std::to_string(n) + "})";
  return "root ::= " + g;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  int count = 0;
  auto write = [&](char target, const std::string& body) {
    std::ofstream(dir + "/seed-" + std::to_string(count++), std::ios::binary)
        << std::string(1, target) << body;
  };
  const std::string items = Nested(R"({"items": )", "}", 100000);
  write('\0', Chat(SchemaField(items)));
  write('\0', Chat(SchemaField(Nested(R"({"type": "object", "properties": {"a": )", "}}", 50000))));
  write('\0', Chat(R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": )" +
                   Nested(R"({"type": "array", "items": )", "}", 60000) + "}}]"));
  write('\0', Chat(SchemaField(Nested(R"({"items": )", "}", 100))));
  write('\0',
        Chat(R"(, "messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c",
      "type": "function", "function": {"name": "f", "arguments": ")" +
             Repeat("[", 10000) + R"("}}]}])"));
  for (int n : {8, 10, 1000}) write('\1', Completion(JsonString(RepeatGrammar(3, n))));
  write('\1', Completion(JsonString("root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"\"")));
  write('\2', RepeatGrammar(3, 8));
  write('\2', RepeatGrammar(2, 1000));
  write('\2', RepeatGrammar(4, 1000));
  write('\2', "root ::= " + Nested("(", ")", 100000, "\"a\""));
  write('\2', "root ::= " + Nested("(", ")", 60, "\"a\"{0,3}") + "\n");
  write('\2', "root ::= \"(\" root \")\" | \"x\"");
  write('\3', items);
  write('\3', Nested(R"({"anyOf": [)", "]}", 70));
  write('\3', Nested(R"({"type": "array", "items": )", "}", 60, R"({"type": "string"})"));
  std::string deep_pml = "<schema name='s'>";
  for (int i = 0; i < 100000; ++i) deep_pml += "<module name='m" + std::to_string(i) + "'>";
  write('\4', deep_pml + Repeat("</module>", 100000) + "</schema>");
  std::string wide = "<schema name='s'><union>";
  for (int i = 0; i < 20000; ++i) wide += "<module name='m" + std::to_string(i) + "'>x</module>";
  write('\4', wide + "</union></schema>");
  write('\5', "<prompt schema='fuzz'>" + Nested("<m>", "</m>", 100000, "") + "</prompt>");
  return 0;
}
