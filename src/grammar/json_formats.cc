// JSON Schema's `format` values as regular expressions (regex_nfa.h), written here from the
// RFCs' grammars, each anchored at both ends. Where a format allows variants that downstream
// code often mishandles, the stricter form is taken (docs/server.md lists each):
// - date (RFC 3339 full-date): YYYY-MM-DD with the days of each month, February 29 only in leap
//   years (divisible by 4, centuries by 400).
// - time (RFC 3339 full-time): hh:mm:ss, optional fraction, an offset required (Z or +hh:mm);
//   hours 00-23, minutes and seconds 00-59 (no leap second), upper-case Z.
// - date-time: a date, upper-case T, a time.
// - duration (RFC 3339 appendix A): P with years, months, days (each unit only after the larger
//   ones, none skipped), and/or T with hours, minutes, seconds; or weeks alone. Not empty.
// - email (RFC 5321 Mailbox, the common subset): a dot-atom local part, '@', a domain of
//   hostname labels with at least one dot, ending in a top-level label of 2-63 letters.
// - hostname (RFC 1123): dot-separated labels of 1-63 letters, digits and inner hyphens, not
//   starting or ending with a hyphen, no trailing dot (the 253-character total is not counted:
//   add maxLength for it).
// - ipv4: four decimal octets 0-255 without leading zeros. ipv6 (RFC 4291 text, RFC 3986
//   IPv6address): eight groups, :: compression, a trailing IPv4; no zone.
// - uuid: 8-4-4-4-12 hexadecimal digits (either case), any version.
// - uri (RFC 3986 URI): a scheme, ':', a hierarchical part that is not empty (//authority with a
//   registered name or [IPv6], and a path; or a path), optional ?query and #fragment;
//   percent-escapes with two hex digits.
#include <map>
#include <mutex>

#include "grammar/regex_nfa.h"

namespace promptcache::grammar_internal {
namespace {

std::string Ipv4() {
  const std::string octet = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
  return "(?:" + octet + "\\." + octet + "\\." + octet + "\\." + octet + ")";
}

// RFC 3986's IPv6address, one alternative per position of "::".
std::string Ipv6() {
  const std::string h = "[0-9A-Fa-f]{1,4}";
  const std::string ls32 = "(?:" + h + ":" + h + "|" + Ipv4() + ")";
  auto before = [&](int n) {  // [ *n( h16 ":" ) h16 ]
    return n < 0 ? std::string() : "(?:(?:" + h + ":){0," + std::to_string(n) + "}" + h + ")?";
  };
  const std::vector<std::string> alts = {
      "(?:" + h + ":){6}" + ls32,
      "::(?:" + h + ":){5}" + ls32,
      before(0) + "::(?:" + h + ":){4}" + ls32,
      before(1) + "::(?:" + h + ":){3}" + ls32,
      before(2) + "::(?:" + h + ":){2}" + ls32,
      before(3) + "::" + h + ":" + ls32,
      before(4) + "::" + ls32,
      before(5) + "::" + h,
      before(6) + "::",
  };
  std::string out;
  for (const std::string& a : alts) out += (out.empty() ? "" : "|") + a;
  return "(?:" + out + ")";
}

std::string Date() {
  const std::string leap =
      "(?:\\d\\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29";
  const std::string other =
      "\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|"
      "02-(?:0[1-9]|1\\d|2[0-8]))";
  return "(?:" + leap + "|" + other + ")";
}

std::string Time() {
  return "(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d+)?(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)";
}

std::string Label() { return "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"; }

std::string Duration() {
  const std::string second = "\\d+S", minute = "\\d+M(?:" + second + ")?",
                    hour = "\\d+H(?:" + minute + ")?";
  const std::string time = "T(?:" + hour + "|" + minute + "|" + second + ")";
  const std::string day = "\\d+D", month = "\\d+M(?:" + day + ")?",
                    year = "\\d+Y(?:" + month + ")?";
  const std::string date = "(?:" + day + "|" + month + "|" + year + ")(?:" + time + ")?";
  return "P(?:" + date + "|" + time + "|\\d+W)";
}

std::string Uri() {
  const std::string pct = "%[0-9A-Fa-f]{2}";
  const std::string pchar = "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|" + pct + ")";
  const std::string userinfo = "(?:[A-Za-z0-9._~!$&'()*+,;=:-]|" + pct + ")*";
  const std::string reg_name = "(?:[A-Za-z0-9._~!$&'()*+,;=-]|" + pct + ")*";
  const std::string authority =
      "(?:" + userinfo + "@)?(?:\\[" + Ipv6() + "\\]|" + reg_name + ")(?::\\d*)?";
  const std::string segments = "(?:/" + pchar + "*)*";
  const std::string hier = "(?://" + authority + segments + "|/(?:" + pchar + "+" + segments +
                           ")?|" + pchar + "+" + segments + ")";
  const std::string tail = "(?:[/?]|" + pchar + ")*";
  return "[A-Za-z][A-Za-z0-9+.-]*:" + hier + "(?:\\?" + tail + ")?(?:#" + tail + ")?";
}

const std::map<std::string, std::string>& Formats() {
  static const std::map<std::string, std::string> formats = {
      {"date", Date()},
      {"time", Time()},
      {"date-time", Date() + "T" + Time()},
      {"duration", Duration()},
      {"email", "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:" +
                    Label() + "\\.)+[A-Za-z]{2,63}"},
      {"hostname", Label() + "(?:\\." + Label() + ")*"},
      {"ipv4", Ipv4()},
      {"ipv6", Ipv6()},
      {"uuid", "[0-9A-Fa-f]{8}-(?:[0-9A-Fa-f]{4}-){3}[0-9A-Fa-f]{12}"},
      {"uri", Uri()},
  };
  return formats;
}

}  // namespace

Result<const Nfa*> FormatNfa(std::string_view format) {
  static std::mutex mu;
  static std::map<std::string, Nfa, std::less<>> built;
  auto it = Formats().find(std::string(format));
  if (it == Formats().end()) {
    std::string known;
    for (const auto& [name, re] : Formats()) known += (known.empty() ? "" : ", ") + name;
    return InvalidArgument("format '" + std::string(format) + "' is not supported (only " + known +
                           ")");
  }
  std::lock_guard<std::mutex> lock(mu);
  auto done = built.find(format);
  if (done != built.end()) return &done->second;
  PC_ASSIGN_OR_RETURN(Nfa nfa, PatternNfa("^(?:" + it->second + ")$"));
  return &built.emplace(it->first, std::move(nfa)).first->second;
}

}  // namespace promptcache::grammar_internal
