// ECMAScript regular expressions (JSON Schema's `pattern`) to automata (regex_nfa.h): a
// recursive-descent parser (its depth bounded) to a syntax tree, Thompson's construction with
// empty moves and the two anchors as guarded empty moves, then the empty moves removed. The
// anchors are exact wherever they stand: a state of the result also records whether a character
// has been read (^ may pass only before any) and $ may pass only where nothing is read after it.
#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "grammar/regex_nfa.h"

namespace promptcache::grammar_internal {
namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;
constexpr int kMaxGroupDepth = 100;
constexpr int kMaxRepeat = 1000;
// States of the construction before empty moves are removed.
constexpr size_t kMaxThompsonStates = 4 * kMaxNfaStates;

struct Node {
  enum Kind { kChars, kCat, kAlt, kRepeat, kBol, kEol } kind = kCat;
  CharSet chars;
  std::vector<Node> kids;
  int min = 0, max = 0;  // kRepeat; max < 0: no bound
};

CharSet Set(std::initializer_list<std::pair<uint32_t, uint32_t>> r) {
  CharSet s(r);
  return Union(s, {});
}

const CharSet& Digits() {
  static const CharSet s = Set({{'0', '9'}});
  return s;
}
const CharSet& Word() {
  static const CharSet s = Set({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
  return s;
}
const CharSet& Space() {
  static const CharSet s = Set({{0x09, 0x0D},
                                {0x20, 0x20},
                                {0xA0, 0xA0},
                                {0x1680, 0x1680},
                                {0x2000, 0x200A},
                                {0x2028, 0x2029},
                                {0x202F, 0x202F},
                                {0x205F, 0x205F},
                                {0x3000, 0x3000},
                                {0xFEFF, 0xFEFF}});
  return s;
}
const CharSet& LineTerminators() {
  static const CharSet s = Set({{0x0A, 0x0A}, {0x0D, 0x0D}, {0x2028, 0x2029}});
  return s;
}

// \d \w \s, and \D \W \S for their complements: true and the set in *out for one of them.
bool ClassEscape(uint32_t e, CharSet* out) {
  static constexpr std::pair<char, const CharSet& (*)()> kClasses[] = {
      {'d', Digits}, {'w', Word}, {'s', Space}};
  for (const auto& [letter, set] : kClasses) {
    if (e == static_cast<uint32_t>(letter)) {
      *out = set();
      return true;
    }
    if (e == static_cast<uint32_t>(letter - 'a' + 'A')) {
      *out = Complement(set());
      return true;
    }
  }
  return false;
}

// The escapes that name a control character.
constexpr std::pair<char, uint32_t> kControlEscapes[] = {
    {'n', '\n'}, {'r', '\r'}, {'t', '\t'}, {'v', 0x0B}, {'f', 0x0C}};

class RegexParser {
 public:
  explicit RegexParser(std::vector<uint32_t> text) : t_(std::move(text)) {}

  Result<Node> Run() {
    Node n;
    PC_RETURN_IF_ERROR(Alternatives(&n));
    if (pos_ < t_.size()) return Error("unmatched ')'");
    return n;
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgument("pattern: " + what + " at offset " + std::to_string(pos_));
  }
  Status Refuse(const std::string& what) const {
    return InvalidArgument("pattern: " + what + " is not supported (at offset " +
                           std::to_string(pos_) + ")");
  }
  bool At(uint32_t c) const { return pos_ < t_.size() && t_[pos_] == c; }
  bool AtDigit() const { return pos_ < t_.size() && t_[pos_] >= '0' && t_[pos_] <= '9'; }

  Status Alternatives(Node* out) {
    out->kind = Node::kAlt;
    for (;;) {
      Node seq;
      seq.kind = Node::kCat;
      while (pos_ < t_.size() && !At('|') && !At(')')) {
        PC_RETURN_IF_ERROR(Quantified(&seq));
      }
      out->kids.push_back(std::move(seq));
      if (!At('|')) return Status::Ok();
      ++pos_;
    }
  }

  // Reads {m}, {m,} or {m,n} at pos_ when it is one; leaves pos_ where it was otherwise.
  bool Braces(int* min, int* max, bool* too_big) {
    size_t p = pos_ + 1;
    auto number = [&](int* v) {
      const size_t start = p;
      long n = 0;
      while (p < t_.size() && t_[p] >= '0' && t_[p] <= '9') {
        n = std::min<long>(n * 10 + (t_[p] - '0'), 1000000);
        ++p;
      }
      *v = static_cast<int>(n);
      if (n > kMaxRepeat) *too_big = true;
      return p > start;
    };
    if (!number(min)) return false;
    *max = *min;
    if (p < t_.size() && t_[p] == ',') {
      ++p;
      *max = -1;
      if (p < t_.size() && t_[p] != '}' && !number(max)) return false;
    }
    if (p >= t_.size() || t_[p] != '}') return false;
    pos_ = p + 1;
    return true;
  }

  Status Quantified(Node* seq) {
    Node atom;
    PC_RETURN_IF_ERROR(Atom(&atom));
    if (pos_ >= t_.size()) {
      seq->kids.push_back(std::move(atom));
      return Status::Ok();
    }
    int min = -2, max = 0;
    bool too_big = false;
    const uint32_t c = t_[pos_];
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : -1;
    } else if (c == '{' && !Braces(&min, &max, &too_big)) {
      min = -2;
    }
    if (min != -2) {
      if (too_big) return Refuse("a repetition count over " + std::to_string(kMaxRepeat));
      if (max >= 0 && max < min) return Error("repetition {m,n} with n < m");
      if (atom.kind == Node::kBol || atom.kind == Node::kEol) {
        return Error("nothing to repeat before the quantifier");
      }
      if (At('?')) ++pos_;  // lazy: the same language
      Node rep;
      rep.kind = Node::kRepeat;
      rep.min = min;
      rep.max = max;
      rep.kids.push_back(std::move(atom));
      atom = std::move(rep);
    }
    seq->kids.push_back(std::move(atom));
    return Status::Ok();
  }

  Status Atom(Node* out) {
    const uint32_t c = t_[pos_];
    out->kind = Node::kChars;
    if (c == '^' || c == '$') {
      ++pos_;
      out->kind = c == '^' ? Node::kBol : Node::kEol;
      return Status::Ok();
    }
    if (c == '*' || c == '+' || c == '?') return Error("nothing to repeat");
    if (c == '{') {
      int a, b;
      bool big = false;
      const size_t at = pos_;
      if (Braces(&a, &b, &big)) {
        pos_ = at;
        return Error("nothing to repeat");
      }
    }
    if (c == '.') {
      ++pos_;
      out->chars = Complement(LineTerminators());
      return Status::Ok();
    }
    if (c == '[') return Class(&out->chars);
    if (c == '\\') {
      ++pos_;
      return AtomEscape(&out->chars);
    }
    if (c == '(') return Group(out);
    ++pos_;
    out->chars = {{c, c}};
    return Status::Ok();
  }

  Status Group(Node* out) {
    ++pos_;
    if (At('?')) {
      ++pos_;
      if (At(':')) {
        ++pos_;
      } else if (At('=')) {
        return Refuse("lookahead '(?='");
      } else if (At('!')) {
        return Refuse("negative lookahead '(?!'");
      } else if (At('<') && pos_ + 1 < t_.size() && (t_[pos_ + 1] == '=' || t_[pos_ + 1] == '!')) {
        return Refuse(t_[pos_ + 1] == '=' ? "lookbehind '(?<='" : "negative lookbehind '(?<!'");
      } else if (At('<')) {  // a named group: (?<name>...)
        while (pos_ < t_.size() && !At('>')) ++pos_;
        if (!At('>')) return Error("unterminated group name");
        ++pos_;
      } else {
        return Error("unknown group '(?'");
      }
    }
    if (++depth_ > kMaxGroupDepth) return Refuse("groups nested over 100 deep");
    PC_RETURN_IF_ERROR(Alternatives(out));
    --depth_;
    if (!At(')')) return Error("missing ')'");
    ++pos_;
    return Status::Ok();
  }

  Status Hex(int digits, uint32_t* out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= t_.size() ||
          !std::isxdigit(static_cast<int>(std::min<uint32_t>(t_[pos_], 127)))) {
        return Error("bad hexadecimal escape");
      }
      const uint32_t h = t_[pos_++];
      v = v * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    *out = v;
    return Status::Ok();
  }

  // An escape after '\' that stands for one character, or a class (\d ...); in_class: \b is a
  // backspace there, a word boundary outside.
  Status Escape(bool in_class, CharSet* out) {
    if (pos_ >= t_.size()) return Error("'\\' at the end");
    const uint32_t e = t_[pos_++];
    uint32_t cp = 0;
    if (ClassEscape(e, out)) return Status::Ok();
    for (const auto& [letter, control] : kControlEscapes) {
      if (e == static_cast<uint32_t>(letter)) {
        *out = {{control, control}};
        return Status::Ok();
      }
    }
    switch (e) {
      case 'b':
        if (!in_class) return Refuse("word boundary '\\b'");
        cp = 0x08;
        break;
      case 'B':
        return Refuse("non-boundary '\\B'");
      case 'k':
        return Refuse("named back-reference '\\k'");
      case 'p':
      case 'P':
        return Refuse("Unicode property escape '\\p'");
      case 'c':
        if (pos_ >= t_.size() ||
            !std::isalpha(static_cast<int>(std::min<uint32_t>(t_[pos_], 127)))) {
          return Error("bad control escape '\\c'");
        }
        cp = t_[pos_++] % 32;
        break;
      case 'x':
        PC_RETURN_IF_ERROR(Hex(2, &cp));
        break;
      case 'u':
        if (At('{')) {
          ++pos_;
          const size_t start = pos_;
          while (pos_ < t_.size() && !At('}') && pos_ - start < 8) {
            uint32_t d = 0;
            PC_RETURN_IF_ERROR(Hex(1, &d));
            cp = cp * 16 + d;
          }
          if (!At('}') || pos_ == start || cp > kMaxCp) return Error("bad escape '\\u{'");
          ++pos_;
        } else {
          PC_RETURN_IF_ERROR(Hex(4, &cp));
          // A surrogate pair written as two escapes is one code point (the u flag).
          if (cp >= 0xD800 && cp <= 0xDBFF && pos_ + 5 < t_.size() + 0 && t_[pos_] == '\\' &&
              t_[pos_ + 1] == 'u') {
            const size_t save = pos_;
            pos_ += 2;
            uint32_t low = 0;
            if (Hex(4, &low).ok() && low >= 0xDC00 && low <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            } else {
              pos_ = save;
            }
          }
        }
        break;
      case '0':
        if (AtDigit()) return Refuse("octal escape '\\0" + std::string(1, char(t_[pos_])) + "'");
        cp = 0;
        break;
      default:
        if (e >= '1' && e <= '9') {
          if (in_class) return Error("bad escape in a class");
          return Refuse("back-reference '\\" + std::string(1, static_cast<char>(e)) + "'");
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
          return Error("unknown escape '\\" + std::string(1, static_cast<char>(e)) + "'");
        }
        cp = e;  // an escaped punctuation character is itself
    }
    *out = {{cp, cp}};
    return Status::Ok();
  }

  Status AtomEscape(CharSet* out) { return Escape(false, out); }

  Status Class(CharSet* out) {
    ++pos_;
    bool negated = false;
    if (At('^')) {
      negated = true;
      ++pos_;
    }
    CharSet set;
    while (pos_ < t_.size() && !At(']')) {
      CharSet lo;
      PC_RETURN_IF_ERROR(ClassAtom(&lo));
      if (At('-') && pos_ + 1 < t_.size() && t_[pos_ + 1] != ']') {
        ++pos_;
        CharSet hi;
        PC_RETURN_IF_ERROR(ClassAtom(&hi));
        const bool single = lo.size() == 1 && lo[0].first == lo[0].second && hi.size() == 1 &&
                            hi[0].first == hi[0].second;
        if (!single) return Error("a class escape in a range");
        if (hi[0].first < lo[0].first) return Error("range out of order in a class");
        set = Union(set, {{lo[0].first, hi[0].first}});
      } else {
        set = Union(set, lo);
      }
    }
    if (!At(']')) return Error("unterminated character class");
    ++pos_;
    *out = negated ? Complement(set) : set;
    return Status::Ok();
  }

  Status ClassAtom(CharSet* out) {
    const uint32_t c = t_[pos_];
    if (c == '\\') {
      ++pos_;
      if (At('-')) {
        ++pos_;
        *out = {{'-', '-'}};
        return Status::Ok();
      }
      return Escape(true, out);
    }
    ++pos_;
    *out = {{c, c}};
    return Status::Ok();
  }

  std::vector<uint32_t> t_;
  size_t pos_ = 0;
  int depth_ = 0;
};

// Thompson's construction: empty moves of three kinds (plain, ^, $) and character moves.
class Thompson {
 public:
  enum Move { kEmpty, kBol, kEol };
  struct State {
    std::vector<std::pair<int, Move>> empty;
    std::vector<std::pair<CharSet, int>> chars;
  };

  int NewState() {
    states_.emplace_back();
    return static_cast<int>(states_.size()) - 1;
  }

  // The fragment of `n` from state `from`; its end state in *to.
  Status Build(const Node& n, int from, int* to) {
    if (states_.size() > kMaxThompsonStates) {
      return InvalidArgument("pattern: too large (more than " + std::to_string(kMaxThompsonStates) +
                             " automaton states)");
    }
    switch (n.kind) {
      case Node::kChars: {
        *to = NewState();
        states_[from].chars.push_back({n.chars, *to});
        return Status::Ok();
      }
      case Node::kBol:
      case Node::kEol: {
        *to = NewState();
        states_[from].empty.push_back({*to, n.kind == Node::kBol ? kBol : kEol});
        return Status::Ok();
      }
      case Node::kCat: {
        int at = from;
        for (const Node& k : n.kids) PC_RETURN_IF_ERROR(Build(k, at, &at));
        *to = at;
        return Status::Ok();
      }
      case Node::kAlt: {
        *to = NewState();
        for (const Node& k : n.kids) {
          const int start = NewState();
          states_[from].empty.push_back({start, kEmpty});
          int end;
          PC_RETURN_IF_ERROR(Build(k, start, &end));
          states_[end].empty.push_back({*to, kEmpty});
        }
        return Status::Ok();
      }
      case Node::kRepeat: {
        int at = from;
        for (int i = 0; i < n.min; ++i) PC_RETURN_IF_ERROR(Build(n.kids[0], at, &at));
        if (n.max < 0) {  // a loop: at -> item -> at
          const int loop = NewState();
          states_[at].empty.push_back({loop, kEmpty});
          int end;
          PC_RETURN_IF_ERROR(Build(n.kids[0], loop, &end));
          states_[end].empty.push_back({loop, kEmpty});
          *to = loop;
          return Status::Ok();
        }
        *to = NewState();
        for (int i = n.min; i < n.max; ++i) {
          states_[at].empty.push_back({*to, kEmpty});
          PC_RETURN_IF_ERROR(Build(n.kids[0], at, &at));
        }
        states_[at].empty.push_back({*to, kEmpty});
        return Status::Ok();
      }
    }
    return Status::Ok();
  }

  // Without empty moves. A state of the result is (state, whether a character was read); the
  // closure of one also tracks whether $ was passed (then no character may follow).
  Result<Nfa> Eliminate(int start, int final) const {
    Nfa out;
    std::map<std::pair<int, bool>, int> ids;
    std::vector<std::pair<int, bool>> work;
    auto id = [&](int q, bool read) {
      auto [it, fresh] = ids.insert({{q, read}, static_cast<int>(out.edges.size())});
      if (fresh) {
        out.edges.emplace_back();
        out.accept.push_back(false);
        work.push_back({q, read});
      }
      return it->second;
    };
    out.start = id(start, false);
    std::vector<uint32_t> seen(states_.size() * 2, 0);  // == stamp: in this closure
    uint32_t stamp = 0;
    while (!work.empty()) {
      const auto [q0, read] = work.back();
      work.pop_back();
      const int from = ids[{q0, read}];
      // Closure over (state, ended).
      ++stamp;
      std::vector<std::pair<int, bool>> stack{{q0, false}};
      seen[q0 * 2] = stamp;
      std::map<int, CharSet> moves;
      while (!stack.empty()) {
        const auto [q, ended] = stack.back();
        stack.pop_back();
        if (q == final) out.accept[from] = true;
        if (!ended) {
          for (const auto& [chars, t] : states_[q].chars) moves[t] = Union(moves[t], chars);
        }
        for (const auto& [t, move] : states_[q].empty) {
          if (move == kBol && read) continue;
          const bool e = ended || move == kEol;
          if (seen[t * 2 + e] != stamp) {
            seen[t * 2 + e] = stamp;
            stack.push_back({t, e});
          }
        }
      }
      for (auto& [t, chars] : moves) {
        const int to = id(t, true);
        out.edges[from].push_back({std::move(chars), to});
      }
      if (out.size() > kMaxNfaStates || out.EdgeCount() > kMaxNfaEdges) {
        return InvalidArgument("pattern: too large (more than " + std::to_string(kMaxNfaStates) +
                               " automaton states)");
      }
    }
    return Trim(out);
  }

 private:
  std::vector<State> states_;
};

}  // namespace

Result<Nfa> PatternNfa(std::string_view pattern) {
  std::vector<uint32_t> cps;
  // Decoded here (regex_nfa.cc's decoder is private): malformed UTF-8 is refused.
  for (size_t i = 0; i < pattern.size();) {
    const unsigned char c = static_cast<unsigned char>(pattern[i]);
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > pattern.size()) return InvalidArgument("pattern: invalid UTF-8");
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; ++k)
      v = (v << 6) | (static_cast<unsigned char>(pattern[i + k]) & 0x3F);
    cps.push_back(v);
    i += len;
  }
  RegexParser parser(std::move(cps));
  PC_ASSIGN_OR_RETURN(Node tree, parser.Run());
  // Unanchored: any text, the pattern, any text.
  Node any;
  any.kind = Node::kRepeat;
  any.min = 0;
  any.max = -1;
  Node one;
  one.kind = Node::kChars;
  one.chars = {{0, kMaxCp}};
  any.kids.push_back(one);
  Node whole;
  whole.kind = Node::kCat;
  whole.kids = {any, std::move(tree), any};
  Thompson t;
  const int start = t.NewState();
  int end;
  PC_RETURN_IF_ERROR(t.Build(whole, start, &end));
  PC_ASSIGN_OR_RETURN(Nfa nfa, t.Eliminate(start, end));
  // Deterministic where that stays small: fewer states to intersect and to hold at run time.
  return Minimal(nfa, 4000);
}

}  // namespace promptcache::grammar_internal
