// One way to name an enum's values: a constexpr table of {value, name} pairs instead of a
// hand-written switch per enum. NameOf looks a value up, with the fallback its site gives for a
// value the table lacks; ValueOf is the inverse. A switch over an enum class had the compiler's
// -Wswitch check that every value was named; a table has NamesEach instead, for a
// static_assert that it names every value from the enum's first to its last exactly once.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <type_traits>

namespace promptcache {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name `table` gives `value`, or `fallback` where it gives none.
template <typename E, size_t N>
constexpr const char* NameOf(const EnumName<E> (&table)[N], E value, const char* fallback) {
  for (const EnumName<E>& e : table) {
    if (e.value == value) return e.name;
  }
  return fallback;
}

// The value `table` names `name`, if any (the first, were two named alike).
template <typename E, size_t N>
constexpr std::optional<E> ValueOf(const EnumName<E> (&table)[N], std::string_view name) {
  for (const EnumName<E>& e : table) {
    if (name == e.name) return e.value;
  }
  return std::nullopt;
}

// True where `table` names each value from `first` to `last` (an enum without gaps) exactly
// once, and nothing else. A value added after `last` escapes it: a site names its enum's last
// value, next to the enum's own list.
template <typename E, size_t N>
constexpr bool NamesEach(const EnumName<E> (&table)[N], E first, E last) {
  using U = std::underlying_type_t<E>;
  const U lo = static_cast<U>(first), hi = static_cast<U>(last);
  if (hi < lo || static_cast<size_t>(hi - lo) + 1 != N) return false;
  for (U v = lo; v <= hi; ++v) {
    size_t times = 0;
    for (const EnumName<E>& e : table) times += static_cast<U>(e.value) == v;
    if (times != 1) return false;
  }
  return true;
}

}  // namespace promptcache
