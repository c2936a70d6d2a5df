// Bounded numbers as digit-wise grammars (json_number.h). A numeral is built digit by digit, in
// a state that says whether the digits so far equal the lower bound's (then the next may not be
// smaller) and the upper bound's (not larger): the classic range construction, run over the
// integer part (one pass per length) and then over the fraction, where a numeral may stop when
// what it would leave (zeros) still satisfies the bounds. Only states from which a numeral can
// still be completed are written, so the grammar never leads into a dead end.
#include "grammar/json_number.h"

#include <map>
#include <tuple>

namespace promptcache::grammar_internal {
namespace {

constexpr int kMaxSignificant = 15;  // numbers: see json_number.h
constexpr int kIntegerDigits = 16;   // integers, where unbounded above
constexpr int kMaxDigits = 40;       // where bounded above (longer bounds: this many digits)

std::string Digits(char lo, char hi) {
  if (lo == hi) return std::string("\"") + lo + "\"";
  return std::string("[") + lo + "-" + hi + "]";
}

// The numerals >= 0 within [lo, hi] (hi optional), for one sign.
class Builder {
 public:
  Builder(NumberBound lo, std::optional<NumberBound> hi, bool integer, const RuleSink& sink)
      : lo_(std::move(lo)), hi_(std::move(hi)), integer_(integer), sink_(sink) {}

  std::string Run() {
    const int lo_len = static_cast<int>(lo_.value.ip.size());
    const int cap = std::max(integer_ ? kIntegerDigits : kMaxSignificant, lo_len);
    const int max_len =
        hi_ ? std::min(static_cast<int>(hi_->value.ip.size()), std::max(kMaxDigits, lo_len)) : cap;
    std::string alts;
    for (int len = lo_len; len <= max_len; ++len) {
      len_ = len;
      int_memo_.clear();
      const bool tl = len == lo_len;
      const bool th = hi_ && len == static_cast<int>(hi_->value.ip.size());
      const std::string e = Int(0, tl, th, false);
      if (!e.empty()) alts += (alts.empty() ? "" : " | ") + e;
    }
    return alts.empty() ? "" : "(" + alts + ")";
  }

 private:
  int FracCap(bool zero) const {
    if (integer_) return 0;
    return zero ? kMaxSignificant : std::max(0, kMaxSignificant - len_);
  }
  char LoFrac(int f) const {
    return f < static_cast<int>(lo_.value.fp.size()) ? lo_.value.fp[f] : '0';
  }
  char HiFrac(int f) const {
    return f < static_cast<int>(hi_->value.fp.size()) ? hi_->value.fp[f] : '0';
  }
  // The numeral may end after f fraction digits.
  bool StopOk(int f, bool tl, bool th) const {
    if (tl && (f < static_cast<int>(lo_.value.fp.size()) || lo_.exclusive)) return false;
    if (th && f >= static_cast<int>(hi_->value.fp.size()) && hi_->exclusive) return false;
    return true;
  }

  // The digit groups at one position: [a, b] with the tightness after them.
  struct Group {
    char a, b;
    bool tl, th;
  };
  static std::vector<Group> Groups(char dmin, char dmax, bool tl, bool th) {
    std::vector<Group> out;
    if (dmin > dmax) return out;
    if (tl && th && dmin == dmax) return {{dmin, dmin, true, true}};
    char a = dmin, b = dmax;
    if (tl) out.push_back({a, a, true, false}), ++a;
    if (th) {
      if (b >= a) out.push_back({b, b, false, true});
      --b;
    }
    if (a <= b) out.push_back({a, b, false, false});
    return out;
  }

  // After f fraction digits (f >= 1), or "" when nothing can complete the numeral from here.
  std::string FracRest(int f, bool tl, bool th, int cap) {
    const auto key = std::make_tuple(f, tl, th, cap);
    if (auto it = frac_memo_.find(key); it != frac_memo_.end()) return it->second;
    std::string out;
    if (!tl && !th) {
      out = cap > f ? "[0-9]{0," + std::to_string(cap - f) + "}" : "\"\"";
    } else {
      std::string alts = FracDigits(f, tl, th, cap);
      const bool stop = StopOk(f, tl, th);
      if (!alts.empty() || stop) {
        const std::string name = sink_.reserve();
        sink_.define(name, alts.empty() ? "\"\"" : (stop ? alts + " | \"\"" : alts));
        out = name;
      }
    }
    frac_memo_[key] = out;
    return out;
  }

  // One more fraction digit and what follows it ("" when none can follow).
  std::string FracDigits(int f, bool tl, bool th, int cap) {
    if (f >= cap) return "";
    const char dmin = tl ? LoFrac(f) : '0', dmax = th ? HiFrac(f) : '9';
    std::string alts;
    for (const Group& g : Groups(dmin, dmax, tl, th)) {
      const std::string rest = FracRest(f + 1, g.tl, g.th, cap);
      if (!rest.empty()) alts += (alts.empty() ? "" : " | ") + Digits(g.a, g.b) + " " + rest;
    }
    return alts;
  }

  // After the integer part: nothing, or a point and at least one digit.
  std::string Fraction(bool tl, bool th, int cap) {
    const std::string digits = FracDigits(0, tl, th, cap);
    const bool stop = StopOk(0, tl, th);
    if (digits.empty()) return stop ? "\"\"" : "";
    const std::string point = "\".\" (" + digits + ")";
    return stop ? "(" + point + ")?" : point;
  }

  // Integer digits from position pos of a numeral of len_ digits.
  std::string Int(int pos, bool tl, bool th, bool zero) {
    if (pos == len_) return Fraction(tl, th, FracCap(zero));
    if (!tl && !th && len_ > 1) {  // free: any digits (no leading zero), any fraction
      const std::string rest = Fraction(false, false, FracCap(false));
      const int n = len_ - pos - (pos == 0 ? 1 : 0);
      std::string out = pos == 0 ? "[1-9]" : "";
      if (n > 0) out += (out.empty() ? "" : " ") + std::string("[0-9]{") + std::to_string(n) + "}";
      return rest == "\"\"" ? out : out + " " + rest;
    }
    const auto key = std::make_tuple(pos, tl, th, zero);
    if (auto it = int_memo_.find(key); it != int_memo_.end()) return it->second;
    const char dmin = tl ? lo_.value.ip[pos] : (pos == 0 && len_ > 1 ? '1' : '0');
    const char dmax = th ? hi_->value.ip[pos] : '9';
    std::vector<Group> groups = Groups(dmin, dmax, tl, th);
    if (len_ == 1) {  // a zero integer part leaves the fraction more digits: on its own
      std::vector<Group> split;
      for (const Group& g : groups) {
        if (g.a == '0' && g.b > '0') {
          split.push_back({'0', '0', g.tl, g.th && g.b == '0'});
          split.push_back({'1', g.b, false, g.th});
        } else {
          split.push_back(g);
        }
      }
      groups = split;
    }
    std::string alts;
    for (const Group& g : groups) {
      const std::string rest = Int(pos + 1, g.tl, g.th, len_ == 1 && g.b == '0');
      if (rest.empty()) continue;
      alts += (alts.empty() ? "" : " | ") + Digits(g.a, g.b) + (rest == "\"\"" ? "" : " " + rest);
    }
    std::string out;
    if (!alts.empty()) {
      out = sink_.reserve();
      sink_.define(out, alts);
    }
    int_memo_[key] = out;
    return out;
  }

  const NumberBound lo_;
  const std::optional<NumberBound> hi_;
  const bool integer_;
  const RuleSink& sink_;
  int len_ = 0;
  std::map<std::tuple<int, bool, bool, bool>, std::string> int_memo_;
  std::map<std::tuple<int, bool, bool, int>, std::string> frac_memo_;
};

Decimal Abs(Decimal d) {
  d.neg = false;
  return d;
}

}  // namespace

Result<Decimal> Decimal::Parse(std::string_view text) {
  size_t i = 0;
  Decimal d;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) d.neg = text[i++] == '-';
  std::string digits;
  long point = -1;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.');
       ++i) {
    if (text[i] == '.') {
      if (point >= 0) return InvalidArgument("not a number: " + std::string(text));
      point = static_cast<long>(digits.size());
    } else {
      digits += text[i];
    }
  }
  if (digits.empty()) return InvalidArgument("not a number: " + std::string(text));
  if (point < 0) point = static_cast<long>(digits.size());
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool neg = false;
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) neg = text[i++] == '-';
    long e = 0;
    const size_t start = i;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      e = std::min(e * 10 + (text[i] - '0'), 100000L);
    }
    if (i == start) return InvalidArgument("not a number: " + std::string(text));
    if (e > 400) return InvalidArgument("number out of range: " + std::string(text));
    point += neg ? -e : e;
  }
  if (i != text.size()) return InvalidArgument("not a number: " + std::string(text));
  // Place the point: pad with zeros on either side.
  if (point < 0) {
    digits.insert(0, static_cast<size_t>(-point), '0');
    point = 0;
  }
  if (point > static_cast<long>(digits.size())) digits.append(point - digits.size(), '0');
  d.ip = digits.substr(0, point);
  d.fp = digits.substr(point);
  d.ip.erase(0, std::min(d.ip.find_first_not_of('0'), d.ip.size()));
  if (d.ip.empty()) d.ip = "0";
  while (!d.fp.empty() && d.fp.back() == '0') d.fp.pop_back();
  if (d.IsZero()) d.neg = false;
  return d;
}

std::string Decimal::ToString() const {
  return (neg ? "-" : "") + ip + (fp.empty() ? "" : "." + fp);
}

int Compare(const Decimal& a, const Decimal& b) {
  if (a.neg != b.neg) return a.neg ? -1 : 1;
  int mag = 0;
  if (a.ip.size() != b.ip.size()) {
    mag = a.ip.size() < b.ip.size() ? -1 : 1;
  } else if (a.ip != b.ip) {
    mag = a.ip < b.ip ? -1 : 1;
  } else if (a.fp != b.fp) {
    mag = a.fp < b.fp ? -1 : 1;
  }
  return a.neg ? -mag : mag;
}

std::string NumberRangeGbnf(const std::optional<NumberBound>& lo,
                            const std::optional<NumberBound>& hi, bool integer,
                            const RuleSink& sink) {
  const Decimal zero;
  std::string alts;
  // Negative numbers: "-" and a magnitude in (|hi| or 0, |lo|].
  if (!lo || lo->value.neg) {
    NumberBound mlo{zero, true};
    if (hi && hi->value.neg) mlo = {Abs(hi->value), hi->exclusive};
    std::optional<NumberBound> mhi;
    if (lo) mhi = NumberBound{Abs(lo->value), lo->exclusive};
    if (!mhi || Compare(mlo.value, mhi->value) <= 0) {
      const std::string e = Builder(mlo, mhi, integer, sink).Run();
      if (!e.empty()) alts = "\"-\" " + e;
    }
  }
  // Zero and positive numbers.
  if (!hi || !hi->value.neg) {
    NumberBound plo{zero, false};
    if (lo && !lo->value.neg) plo = *lo;
    if (!hi || Compare(plo.value, hi->value) <= 0) {
      const std::string e = Builder(plo, hi, integer, sink).Run();
      if (!e.empty()) alts += (alts.empty() ? "" : " | ") + e;
    }
  }
  return alts.empty() ? "" : "(" + alts + ")";
}

}  // namespace promptcache::grammar_internal
