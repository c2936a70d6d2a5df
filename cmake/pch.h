// The headers precompiled for every C++ target (cmake/Precompile.cmake): the standard library's
// most included and nlohmann-json (cmake/pch_test.h adds GoogleTest for the tests).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
