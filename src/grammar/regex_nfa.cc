// Automata over code points: sets of code points, products, trimming, and GBNF of JSON strings
// (regex_nfa.h). The regular-expression parser is regex_parse.cc.
#include "grammar/regex_nfa.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>

namespace promptcache::grammar_internal {
namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;

// Decodes UTF-8; false on malformed text.
bool DecodeUtf8(std::string_view s, std::vector<uint32_t>* out) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      v = (v << 6) | (d & 0x3F);
    }
    out->push_back(v);
    i += len;
  }
  return true;
}

// A code point as a GBNF escape (inside a class or a literal).
std::string CpEscape(uint32_t cp) {
  char buf[16];
  if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) {
    return std::string(1, static_cast<char>(cp));
  }
  if (cp < 0x100) {
    std::snprintf(buf, sizeof(buf), "\\x%02X", cp);
  } else if (cp < 0x10000) {
    std::snprintf(buf, sizeof(buf), "\\u%04X", cp);
  } else {
    std::snprintf(buf, sizeof(buf), "\\U%08X", cp);
  }
  return buf;
}

std::string ClassGbnf(const CharSet& set) {
  std::string out = "[";
  for (const auto& [lo, hi] : set) {
    out += CpEscape(lo);
    if (hi != lo) out += "-" + CpEscape(hi);
  }
  return out + "]";
}

const CharSet& AnyChar() {
  static const CharSet any = {{0, kMaxCp}};
  return any;
}

}  // namespace

CharSet Union(const CharSet& a, const CharSet& b) {
  CharSet all = a;
  all.insert(all.end(), b.begin(), b.end());
  std::sort(all.begin(), all.end());
  CharSet out;
  for (const auto& r : all) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CharSet Intersect(const CharSet& a, const CharSet& b) {
  CharSet out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const uint32_t lo = std::max(a[i].first, b[j].first);
    const uint32_t hi = std::min(a[i].second, b[j].second);
    if (lo <= hi) out.push_back({lo, hi});
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

CharSet Complement(const CharSet& a) {
  CharSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : a) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCp) out.push_back({next, kMaxCp});
  return out;
}

bool Contains(const CharSet& a, uint32_t cp) {
  for (const auto& [lo, hi] : a) {
    if (cp >= lo && cp <= hi) return true;
  }
  return false;
}

size_t Nfa::EdgeCount() const {
  size_t n = 0;
  for (const auto& e : edges) n += e.size();
  return n;
}

bool Nfa::Matches(std::string_view text) const {
  std::vector<uint32_t> cps;
  if (!DecodeUtf8(text, &cps) || edges.empty()) return false;
  std::vector<bool> cur(size(), false);
  cur[start] = true;
  for (const uint32_t cp : cps) {
    std::vector<bool> next(size(), false);
    bool any = false;
    for (size_t s = 0; s < size(); ++s) {
      if (!cur[s]) continue;
      for (const Edge& e : edges[s]) {
        if (Contains(e.chars, cp)) next[e.to] = any = true;
      }
    }
    if (!any) return false;
    cur.swap(next);
  }
  for (size_t s = 0; s < size(); ++s) {
    if (cur[s] && accept[s]) return true;
  }
  return false;
}

bool Nfa::Empty() const {
  const Nfa t = Trim(*this);
  return !t.accept[t.start] && t.edges[t.start].empty();
}

Nfa LengthNfa(int min, int max) {
  Nfa n;
  const int last = max < 0 ? min : max;
  n.edges.resize(last + 1);
  n.accept.resize(last + 1);
  for (int i = 0; i <= last; ++i) {
    n.accept[i] = i >= min;
    if (i < last) n.edges[i].push_back({AnyChar(), i + 1});
  }
  if (max < 0) n.edges[last].push_back({AnyChar(), last});
  return n;
}

Nfa ExcludeNfa(const std::vector<std::string>& words) {
  // A trie of the words (deterministic), each node's other characters leading to a sink that
  // accepts everything; the words' own ends do not accept.
  Nfa n;
  n.edges.resize(2);
  n.accept = {true, true};  // 0: root, 1: sink
  n.edges[1].push_back({AnyChar(), 1});
  std::vector<std::map<uint32_t, int>> kids(2);
  for (const std::string& w : words) {
    std::vector<uint32_t> cps;
    if (!DecodeUtf8(w, &cps)) continue;
    int at = 0;
    for (const uint32_t cp : cps) {
      auto it = kids[at].find(cp);
      if (it == kids[at].end()) {
        const int id = static_cast<int>(n.edges.size());
        n.edges.emplace_back();
        n.accept.push_back(true);
        kids.emplace_back();
        kids[at][cp] = id;
        at = id;
      } else {
        at = it->second;
      }
    }
    n.accept[at] = false;
  }
  for (size_t s = 0; s < n.size(); ++s) {
    if (s == 1) continue;
    CharSet used;
    for (const auto& [cp, to] : kids[s]) {
      n.edges[s].push_back({{{cp, cp}}, to});
      used = Union(used, {{cp, cp}});
    }
    const CharSet rest = Complement(used);
    if (!rest.empty()) n.edges[s].push_back({rest, 1});
  }
  return n;
}

Nfa Trim(const Nfa& nfa) {
  const size_t n = nfa.size();
  std::vector<bool> fwd(n, false), back(n, false);
  std::vector<std::vector<int>> rev(n);
  std::vector<int> work{nfa.start};
  fwd[nfa.start] = true;
  while (!work.empty()) {
    const int s = work.back();
    work.pop_back();
    for (const auto& e : nfa.edges[s]) {
      rev[e.to].push_back(s);
      if (!fwd[e.to]) {
        fwd[e.to] = true;
        work.push_back(e.to);
      }
    }
  }
  for (size_t s = 0; s < n; ++s) {
    if (fwd[s] && nfa.accept[s]) {
      back[s] = true;
      work.push_back(static_cast<int>(s));
    }
  }
  while (!work.empty()) {
    const int s = work.back();
    work.pop_back();
    for (const int p : rev[s]) {
      if (!back[p]) {
        back[p] = true;
        work.push_back(p);
      }
    }
  }
  Nfa out;
  if (!back[nfa.start]) {  // nothing is accepted
    out.edges.resize(1);
    out.accept = {false};
    return out;
  }
  std::vector<int> id(n, -1);
  // The start first, so that it is state 0.
  id[nfa.start] = 0;
  int next = 1;
  for (size_t s = 0; s < n; ++s) {
    if (back[s] && static_cast<int>(s) != nfa.start) id[s] = next++;
  }
  out.edges.resize(next);
  out.accept.resize(next);
  for (size_t s = 0; s < n; ++s) {
    if (id[s] < 0) continue;
    out.accept[id[s]] = nfa.accept[s];
    // Edges to the same state are merged into one set.
    std::map<int, CharSet> by_target;
    for (const auto& e : nfa.edges[s]) {
      if (id[e.to] >= 0 && !e.chars.empty()) {
        by_target[id[e.to]] = Union(by_target[id[e.to]], e.chars);
      }
    }
    for (auto& [to, chars] : by_target) out.edges[id[s]].push_back({std::move(chars), to});
  }
  return out;
}

Result<Nfa> IntersectNfa(const Nfa& a, const Nfa& b, const std::string& what) {
  Nfa out;
  std::map<std::pair<int, int>, int> ids;
  std::deque<std::pair<int, int>> work;
  size_t edges = 0;
  auto id = [&](int p, int q) {
    auto [it, fresh] = ids.insert({{p, q}, static_cast<int>(out.edges.size())});
    if (fresh) {
      out.edges.emplace_back();
      out.accept.push_back(a.accept[p] && b.accept[q]);
      work.push_back({p, q});
    }
    return it->second;
  };
  out.start = id(a.start, b.start);
  while (!work.empty()) {
    const auto [p, q] = work.front();
    work.pop_front();
    const int from = ids[{p, q}];
    for (const auto& ea : a.edges[p]) {
      for (const auto& eb : b.edges[q]) {
        CharSet both = Intersect(ea.chars, eb.chars);
        if (both.empty()) continue;
        const int to = id(ea.to, eb.to);
        out.edges[from].push_back({std::move(both), to});
        if (out.size() > kMaxNfaStates || ++edges > kMaxNfaEdges) {
          return InvalidArgument("JSON schema: " + what +
                                 " together need an automaton of more than " +
                                 std::to_string(kMaxNfaStates) + " states or " +
                                 std::to_string(kMaxNfaEdges) + " edges (too large to enforce)");
        }
      }
    }
  }
  return Minimal(Trim(out), 4000);
}

namespace {

// A deterministic automaton: subset d of the NFA's states, trans[d][c] its move on class c
// ([cuts[c], cuts[c + 1])), -1 for none; `work` counts what building it cost.
struct Dfa {
  std::vector<uint32_t> cuts;
  std::vector<std::vector<int>> sets, trans;
  size_t work = 0;
};

// Work and memory stay bounded: past these the automaton is kept as it is.
constexpr size_t kMaxWork = size_t{1} << 22;

// The subset construction, or false when it would pass `limit` states or the work bound.
bool Determinize(const Nfa& nfa, size_t limit, Dfa* dfa) {
  // Classes: the intervals between the edges' boundaries that some edge covers.
  std::vector<uint32_t>& cuts = dfa->cuts;
  cuts = {0, kMaxCp + 1};
  for (const auto& edges : nfa.edges) {
    for (const auto& e : edges) {
      for (const auto& [lo, hi] : e.chars) {
        cuts.push_back(lo);
        cuts.push_back(hi + 1);
      }
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  const size_t k = cuts.size() - 1;  // class c: [cuts[c], cuts[c + 1])
  if (k * std::min(limit, nfa.size() + 1) > kMaxWork) return false;
  auto class_of = [&](uint32_t cp) {
    return static_cast<size_t>(std::upper_bound(cuts.begin(), cuts.end(), cp) - cuts.begin()) - 1;
  };
  // Per state, per class: the targets (an NFA's edges become class lists once).
  std::vector<std::vector<std::pair<size_t, int>>> moves(nfa.size());
  size_t& work = dfa->work;
  for (size_t s = 0; s < nfa.size(); ++s) {
    for (const auto& e : nfa.edges[s]) {
      for (const auto& [lo, hi] : e.chars) {
        for (size_t c = class_of(lo); c < k && cuts[c] <= hi; ++c) moves[s].push_back({c, e.to});
      }
    }
    if ((work += moves[s].size()) > kMaxWork) return false;
  }
  // Subset construction; trans[d][c]: the target subset's index, -1: none.
  std::map<std::vector<int>, int> ids;
  std::vector<std::vector<int>>& sets = dfa->sets;
  std::vector<std::vector<int>>& trans = dfa->trans;
  auto id = [&](std::vector<int> set) {
    std::sort(set.begin(), set.end());
    set.erase(std::unique(set.begin(), set.end()), set.end());
    auto [it, fresh] = ids.insert({set, static_cast<int>(sets.size())});
    if (fresh) {
      work += set.size();
      sets.push_back(std::move(set));
    }
    return it->second;
  };
  id({nfa.start});
  for (size_t d = 0; d < sets.size(); ++d) {
    if (sets.size() > limit || work > 2 * kMaxWork) return false;
    std::vector<std::vector<int>> to(k);
    for (const int s : sets[d]) {
      for (const auto& [c, t] : moves[s]) to[c].push_back(t);
    }
    std::vector<int> row(k, -1);
    for (size_t c = 0; c < k; ++c) {
      if (!to[c].empty()) row[c] = id(std::move(to[c]));
    }
    trans.push_back(std::move(row));
  }
  return true;
}

}  // namespace

Nfa Minimal(const Nfa& nfa, size_t limit) {
  Dfa dfa;
  if (!Determinize(nfa, limit, &dfa)) return nfa;
  const std::vector<uint32_t>& cuts = dfa.cuts;
  const std::vector<std::vector<int>>& sets = dfa.sets;
  const std::vector<std::vector<int>>& trans = dfa.trans;
  const size_t k = cuts.size() - 1;
  size_t work = dfa.work;
  const size_t n = sets.size();
  // Moore: blocks refined by (block, each class's target block) until stable.
  std::vector<int> block(n);
  for (size_t d = 0; d < n; ++d) {
    bool acc = false;
    for (const int s : sets[d]) acc = acc || nfa.accept[s];
    block[d] = acc ? 1 : 0;
  }
  for (size_t blocks = 0;;) {
    if ((work += n * (k + 1)) > 8 * kMaxWork) return nfa;
    std::map<std::vector<int>, int> sig;
    std::vector<int> next(n);
    for (size_t d = 0; d < n; ++d) {
      std::vector<int> key = {block[d]};
      for (size_t c = 0; c < k; ++c) key.push_back(trans[d][c] < 0 ? -1 : block[trans[d][c]]);
      next[d] = sig.insert({key, static_cast<int>(sig.size())}).first->second;
    }
    block.swap(next);
    if (sig.size() == blocks) break;
    blocks = sig.size();
  }
  Nfa out;
  const int m = *std::max_element(block.begin(), block.end()) + 1;
  out.edges.resize(m);
  out.accept.assign(m, false);
  std::vector<bool> done(m, false);
  for (size_t d = 0; d < n; ++d) {
    const int b = block[d];
    for (const int s : sets[d]) out.accept[b] = out.accept[b] || nfa.accept[s];
    if (done[b]) continue;
    done[b] = true;
    std::map<int, CharSet> by_target;
    for (size_t c = 0; c < k; ++c) {
      if (trans[d][c] >= 0) {
        by_target[block[trans[d][c]]] =
            Union(by_target[block[trans[d][c]]], {{cuts[c], cuts[c + 1] - 1}});
      }
    }
    for (auto& [t, chars] : by_target) out.edges[b].push_back({std::move(chars), t});
  }
  out.start = block[0];
  return Trim(out);
}

std::string JsonCharGbnf(const CharSet& set) {
  // Raw: everything JSON lets a string hold as itself (UTF-8 cannot encode surrogates).
  static const CharSet kRaw = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0xD7FF}, {0xE000, kMaxCp}};
  const CharSet raw = Intersect(set, kRaw);
  std::string letters;
  for (const auto& [cp, letter] : std::vector<std::pair<uint32_t, char>>{{'"', '"'},
                                                                         {'\\', '\\'},
                                                                         {'/', '/'},
                                                                         {0x08, 'b'},
                                                                         {0x0C, 'f'},
                                                                         {0x0A, 'n'},
                                                                         {0x0D, 'r'},
                                                                         {0x09, 't'}}) {
    if (Contains(set, cp)) letters += CpEscape(static_cast<unsigned char>(letter));
  }
  // Control characters as \u00XX, either case of hex digit.
  std::string hex[2];
  for (uint32_t cp = 0; cp < 0x20; ++cp) {
    if (!Contains(set, cp)) continue;
    const uint32_t low = cp & 0xF;
    hex[cp >> 4] += low < 10 ? std::string(1, static_cast<char>('0' + low))
                             : std::string(1, static_cast<char>('a' + low - 10)) +
                                   static_cast<char>('A' + low - 10);
  }
  std::vector<std::string> esc;
  if (!letters.empty()) esc.push_back("[" + letters + "]");
  std::string u;
  for (int h = 0; h < 2; ++h) {
    if (hex[h].empty()) continue;
    u += (u.empty() ? "" : " | ") + std::string(h ? "\"1\" [" : "\"0\" [") + hex[h] + "]";
  }
  if (!u.empty()) esc.push_back("\"u00\" (" + u + ")");
  std::string out;
  if (!raw.empty()) out = ClassGbnf(raw);
  if (!esc.empty()) {
    std::string e = "\"\\\\\" ";
    if (esc.size() == 1) {
      e += esc[0];
    } else {
      e += "(" + esc[0] + " | " + esc[1] + ")";
    }
    out += (out.empty() ? "" : " | ") + e;
  }
  return out;
}

std::string NfaToJsonString(const Nfa& nfa, const RuleSink& sink) {
  std::map<CharSet, std::string> chars;  // one rule per set of characters
  std::vector<std::string> names(nfa.size());
  for (size_t s = 0; s < nfa.size(); ++s) names[s] = sink.reserve();
  for (size_t s = 0; s < nfa.size(); ++s) {
    std::string body;
    for (const auto& e : nfa.edges[s]) {
      auto it = chars.find(e.chars);
      if (it == chars.end()) {
        const std::string name = sink.reserve();
        sink.define(name, JsonCharGbnf(e.chars));
        it = chars.emplace(e.chars, name).first;
      }
      body += (body.empty() ? "" : " | ") + it->second + " " + names[e.to];
    }
    if (nfa.accept[s]) body += body.empty() ? "\"\"" : " | \"\"";
    sink.define(names[s], body);
  }
  return "\"\\\"\" " + names[nfa.start] + " \"\\\"\"";
}

}  // namespace promptcache::grammar_internal
