// GBNF text to Grammar: a recursive-descent parser over the text (its depth bounded before each
// group recurses), then checks (every rule defined, a root, no left recursion, a bounded number
// of ways to go on at every point) so that the recognizer always terminates within its bounds,
// and the start state.
#include <algorithm>
#include <map>

#include "grammar/grammar.h"
#include "grammar/grammar_expand.h"

namespace promptcache {

namespace {

// Bounds on untrusted grammars: the text's nesting and the compiled size.
constexpr int kMaxDepth = 64;
constexpr size_t kMaxElements = 200000;
constexpr int kMaxRepeat = 1000;  // {m,n} bounds

bool IsWordChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

}  // namespace

bool GrammarElement::Matches(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges) {
    if (cp >= lo && cp <= hi) {
      in = true;
      break;
    }
  }
  return in != negated;
}

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  Result<std::shared_ptr<const Grammar>> Run() {
    auto g = std::make_shared<Grammar>();
    g_ = g.get();
    SkipSpace(true);
    while (pos_ < text_.size()) {
      PC_RETURN_IF_ERROR(ParseRule());
      SkipSpace(true);
    }
    for (size_t r = 0; r < g_->rules_.size(); ++r) {
      if (!defined_[r]) return Error("rule '" + g_->names_[r] + "' is used but not defined");
    }
    auto root = ids_.find("root");
    if (root == ids_.end()) return InvalidArgument("grammar: no 'root' rule");
    g_->root_ = root->second;
    PC_RETURN_IF_ERROR(CheckLeftRecursion());
    PC_RETURN_IF_ERROR(grammar_internal::CheckWays(*g_, nullable_, owner_));
    PC_RETURN_IF_ERROR(ComputeStart());
    return std::shared_ptr<const Grammar>(std::move(g));
  }

 private:
  using Alt = std::vector<GrammarElement>;

  Status Error(const std::string& what) const {
    // Line and column of pos_, for a one-line message.
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return InvalidArgument("grammar:" + std::to_string(line) + ":" + std::to_string(col) + ": " +
                           what);
  }

  int32_t RuleId(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const int32_t id = static_cast<int32_t>(g_->rules_.size());
    ids_[name] = id;
    g_->names_.push_back(name);
    g_->rules_.emplace_back();
    defined_.push_back(false);
    owner_.push_back(id);
    return id;
  }

  int32_t NewRule(const std::string& base) {
    std::string name;
    do {
      name = base + "-" + std::to_string(++generated_);
    } while (ids_.count(name));
    const int32_t id = RuleId(name);
    defined_[id] = true;
    owner_[id] = owner_[RuleId(base)];  // errors name the rule the text wrote
    return id;
  }

  // Spaces and comments; newlines only when `newlines` (a rule ends at a newline otherwise).
  void SkipSpace(bool newlines) {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  // Inside parentheses a newline is only space.
  void Space() { SkipSpace(depth_ > 0); }

  std::string Name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && IsWordChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  Status ParseRule() {
    const std::string name = Name();
    if (name.empty()) return Error("expected a rule name");
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=") return Error("expected '::=' after '" + name + "'");
    pos_ += 3;
    SkipSpace(true);
    const int32_t id = RuleId(name);
    if (defined_[id]) return Error("rule '" + name + "' is defined twice");
    defined_[id] = true;
    std::vector<Alt> alts;
    PC_RETURN_IF_ERROR(ParseAlternatives(name, &alts));
    g_->rules_[id] = std::move(alts);
    if (pos_ < text_.size() && text_[pos_] != '\n') return Error("unexpected character");
    return Status::Ok();
  }

  Status ParseAlternatives(const std::string& rule, std::vector<Alt>* alts) {
    for (;;) {
      Alt seq;
      PC_RETURN_IF_ERROR(ParseSequence(rule, &seq));
      seq.push_back(GrammarElement{});  // kEnd
      alts->push_back(std::move(seq));
      Space();
      if (pos_ < text_.size() && text_[pos_] == '|') {
        ++pos_;
        SkipSpace(true);
        continue;
      }
      return Status::Ok();
    }
  }

  Status Count(size_t n) {
    elements_ += n;
    if (elements_ > kMaxElements) return Error("the grammar is too large");
    return Status::Ok();
  }

  // Reads one code point of a literal or class, with escapes.
  Status ReadChar(uint32_t* out) {
    if (pos_ >= text_.size()) return Error("unexpected end of the grammar");
    const unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c == '\\') {
      if (++pos_ >= text_.size()) return Error("unexpected end after '\\'");
      const char e = text_[pos_++];
      int digits = 0;
      switch (e) {
        case 'n':
          *out = '\n';
          return Status::Ok();
        case 'r':
          *out = '\r';
          return Status::Ok();
        case 't':
          *out = '\t';
          return Status::Ok();
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '\'':
        case '/':
          *out = static_cast<unsigned char>(e);
          return Status::Ok();
        case 'x':
          digits = 2;
          break;
        case 'u':
          digits = 4;
          break;
        case 'U':
          digits = 8;
          break;
        default:
          return Error(std::string("unknown escape '\\") + e + "'");
      }
      uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_]))) {
          return Error("bad hex escape");
        }
        const char h = text_[pos_++];
        v = v * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      if (v > 0x10FFFF) return Error("code point out of range");
      *out = v;
      return Status::Ok();
    }
    // UTF-8.
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + len > text_.size()) return Error("invalid UTF-8");
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const unsigned char d = static_cast<unsigned char>(text_[pos_ + i]);
      if ((d & 0xC0) != 0x80) return Error("invalid UTF-8");
      v = (v << 6) | (d & 0x3F);
    }
    pos_ += len;
    *out = v;
    return Status::Ok();
  }

  static GrammarElement Chars(uint32_t lo, uint32_t hi, bool negated = false) {
    GrammarElement e;
    e.kind = GrammarElement::kChars;
    e.negated = negated;
    e.ranges.push_back({lo, hi});
    return e;
  }

  static GrammarElement Ref(int32_t rule) {
    GrammarElement e;
    e.kind = GrammarElement::kRule;
    e.rule = rule;
    return e;
  }

  // One item of a sequence, appended to *seq (a literal appends one element per character).
  // *start is where the item begins in *seq, for a postfix operator.
  Status ParseItem(const std::string& rule, Alt* seq, size_t* start) {
    *start = seq->size();
    const char c = text_[pos_];
    if (c == '"') {
      ++pos_;
      while (pos_ < text_.size() && text_[pos_] != '"') {
        uint32_t cp;
        PC_RETURN_IF_ERROR(ReadChar(&cp));
        seq->push_back(Chars(cp, cp));
        PC_RETURN_IF_ERROR(Count(1));
      }
      if (pos_ >= text_.size()) return Error("unterminated literal");
      ++pos_;
      if (seq->size() == *start) {  // "": an empty rule, so a postfix has an item to apply to
        const int32_t empty = NewRule(rule);
        g_->rules_[empty] = {Alt{GrammarElement{}}};
        seq->push_back(Ref(empty));
      }
      return Status::Ok();
    }
    if (c == '[') {
      ++pos_;
      GrammarElement e;
      e.kind = GrammarElement::kChars;
      if (pos_ < text_.size() && text_[pos_] == '^') {
        e.negated = true;
        ++pos_;
      }
      while (pos_ < text_.size() && text_[pos_] != ']') {
        uint32_t lo, hi;
        PC_RETURN_IF_ERROR(ReadChar(&lo));
        hi = lo;
        if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
          ++pos_;
          PC_RETURN_IF_ERROR(ReadChar(&hi));
          if (hi < lo) return Error("character range out of order");
        }
        e.ranges.push_back({lo, hi});
        if (e.ranges.size() > 4096) return Error("character class too large");
      }
      if (pos_ >= text_.size()) return Error("unterminated character class");
      ++pos_;
      seq->push_back(std::move(e));
      return Count(1);
    }
    if (c == '.') {
      ++pos_;
      seq->push_back(Chars(0, 0x10FFFF));
      return Count(1);
    }
    if (c == '(') {
      ++pos_;
      if (++depth_ > kMaxDepth) return Error("groups nested too deeply");
      const int32_t group = NewRule(rule);
      std::vector<Alt> alts;
      PC_RETURN_IF_ERROR(ParseAlternatives(rule, &alts));
      Space();
      if (pos_ >= text_.size() || text_[pos_] != ')') return Error("expected ')'");
      ++pos_;
      --depth_;
      g_->rules_[group] = std::move(alts);
      seq->push_back(Ref(group));
      return Count(1);
    }
    if (IsWordChar(c)) {
      const std::string name = Name();
      seq->push_back(Ref(RuleId(name)));
      return Count(1);
    }
    return Error(std::string("unexpected character '") + c + "'");
  }

  // Rewrites the item at seq[start..] with a postfix operator into a new rule.
  Status Repeat(const std::string& rule, Alt* seq, size_t start, int min, int max) {
    Alt item(seq->begin() + start, seq->end());
    seq->resize(start);
    PC_RETURN_IF_ERROR(Count(item.size() * size_t(std::max(min, 1) + (max < 0 ? 1 : 0))));
    if (max < 0) {
      // item{min,}: min copies, then rest ::= item rest | "" (right recursion).
      for (int i = 0; i < min; ++i) seq->insert(seq->end(), item.begin(), item.end());
      const int32_t rest = NewRule(rule);
      Alt loop = item;
      loop.push_back(Ref(rest));
      loop.push_back(GrammarElement{});
      g_->rules_[rest] = {std::move(loop), Alt{GrammarElement{}}};
      seq->push_back(Ref(rest));
      return Status::Ok();
    }
    for (int i = 0; i < min; ++i) seq->insert(seq->end(), item.begin(), item.end());
    // Up to max - min optional ones, nested: opt ::= item opt' | "".
    int32_t next = -1;
    for (int i = 0; i < max - min; ++i) {
      const int32_t opt = NewRule(rule);
      Alt more = item;
      if (next >= 0) more.push_back(Ref(next));
      more.push_back(GrammarElement{});
      g_->rules_[opt] = {std::move(more), Alt{GrammarElement{}}};
      next = opt;
      PC_RETURN_IF_ERROR(Count(item.size() + 2));
    }
    if (next >= 0) seq->push_back(Ref(next));
    return Status::Ok();
  }

  Status ParseInt(int* out) {
    const size_t start = pos_;
    long v = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      v = v * 10 + (text_[pos_++] - '0');
      if (v > kMaxRepeat) return Error("repetition bound over " + std::to_string(kMaxRepeat));
    }
    if (pos_ == start) return Error("expected a number");
    *out = static_cast<int>(v);
    return Status::Ok();
  }

  Status ParseSequence(const std::string& rule, Alt* seq) {
    for (;;) {
      Space();
      if (pos_ >= text_.size()) return Status::Ok();
      const char c = text_[pos_];
      if (c == '|' || c == ')' || c == '\n') return Status::Ok();
      // A name followed by ::= starts the next rule (rules may follow on one line only after a
      // newline, but be lenient as llama.cpp is not: stop here).
      size_t start;
      PC_RETURN_IF_ERROR(ParseItem(rule, seq, &start));
      Space();
      if (pos_ >= text_.size()) return Status::Ok();
      const char op = text_[pos_];
      if (op == '*' || op == '+' || op == '?') {
        ++pos_;
        PC_RETURN_IF_ERROR(Repeat(rule, seq, start, op == '+' ? 1 : 0, op == '?' ? 1 : -1));
      } else if (op == '{') {
        ++pos_;
        Space();
        int min = 0, max = -1;
        PC_RETURN_IF_ERROR(ParseInt(&min));
        Space();
        if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          Space();
          if (pos_ < text_.size() && text_[pos_] != '}') PC_RETURN_IF_ERROR(ParseInt(&max));
        } else {
          max = min;
        }
        Space();
        if (pos_ >= text_.size() || text_[pos_] != '}') return Error("expected '}'");
        ++pos_;
        if (max >= 0 && max < min) return Error("repetition {m,n} with n < m");
        PC_RETURN_IF_ERROR(Repeat(rule, seq, start, min, max));
      }
    }
  }

  // Left recursion (a rule reachable from itself before any character) would make the
  // recognizer expand forever: refused. Nullable rules are found first (a fixed point).
  Status CheckLeftRecursion() {
    const auto& rules = g_->rules_;
    const size_t n = rules.size();
    nullable_.assign(n, false);
    std::vector<bool>& nullable = nullable_;
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Alt& alt : rules[r]) {
          bool all = true;
          for (const GrammarElement& e : alt) {
            if (e.kind == GrammarElement::kEnd) break;
            if (e.kind == GrammarElement::kChars || !nullable[e.rule]) {
              all = false;
              break;
            }
          }
          if (all) {
            nullable[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    // Edges: r -> s when s can come first in r.
    std::vector<std::vector<int32_t>> first(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Alt& alt : rules[r]) {
        for (const GrammarElement& e : alt) {
          if (e.kind != GrammarElement::kRule) break;
          first[r].push_back(e.rule);
          if (!nullable[e.rule]) break;
        }
      }
    }
    // Iterative DFS for a cycle.
    std::vector<uint8_t> color(n, 0);
    for (size_t s = 0; s < n; ++s) {
      if (color[s]) continue;
      std::vector<std::pair<int32_t, size_t>> stack{{static_cast<int32_t>(s), 0}};
      color[s] = 1;
      while (!stack.empty()) {
        auto& [r, i] = stack.back();
        if (i < first[r].size()) {
          const int32_t t = first[r][i++];
          if (color[t] == 1) {
            return InvalidArgument("grammar: rule '" + g_->names_[t] +
                                   "' is left-recursive (not supported)");
          }
          if (color[t] == 0) {
            color[t] = 1;
            stack.push_back({t, 0});
          }
        } else {
          color[r] = 2;
          stack.pop_back();
        }
      }
    }
    return Status::Ok();
  }

  // The start state (root's alternatives, expanded), so that GrammarState costs a copy.
  Status ComputeStart() {
    size_t budget = kMaxGrammarStepWork;
    grammar_internal::StackExpander x(*g_, &budget);
    grammar_internal::ExpandResult r = grammar_internal::ExpandResult::kOk;
    for (const Alt& alt : g_->rules_[g_->root_]) {
      const GrammarElement* first = alt[0].kind != GrammarElement::kEnd ? &alt[0] : nullptr;
      if (r == grammar_internal::ExpandResult::kOk) r = x.Add({}, first, nullptr);
    }
    if (r == grammar_internal::ExpandResult::kOk) r = x.Run(&g_->start_);
    if (r != grammar_internal::ExpandResult::kOk) {
      return InvalidArgument("grammar: the start of rule 'root' needs " +
                             grammar_internal::ExpandProblem(r));
    }
    return Status::Ok();
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
  int generated_ = 0;
  size_t elements_ = 0;
  Grammar* g_ = nullptr;
  std::map<std::string, int32_t> ids_;
  std::vector<bool> defined_;
  std::vector<int32_t> owner_;  // the rule written in the text that each rule comes from
  std::vector<bool> nullable_;  // rules that can match nothing (CheckLeftRecursion)
};

std::string GbnfLiteral(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  return out + "\"";
}

Result<std::shared_ptr<const Grammar>> Grammar::Parse(std::string_view text) {
  GbnfParser p(text);
  return p.Run();
}

}  // namespace promptcache
