# Precompiled headers (PC_PCH, on by default). Parsing the standard library, nlohmann-json and
# GoogleTest took about 2 s of every translation unit's compile, and most of the project's units
# include them. Two carrier targets each compile those headers once: one for the tests, one for
# everything else. Every other C++ target then reuses the matching one (REUSE_FROM). GCC and
# clang check that a unit's flags fit the precompiled state, and parse the headers as text where
# they do not, so a mismatch costs time, never correctness.
#
# GCC 12 loses the system-header mark of precompiled code inlined into ours, and then reports
# its known false positives in std::string's copies (-Warray-bounds 40 times in one build, and
# with that off, -Wstringop-overflow and -Wstringop-overread 56 times), which it keeps quiet
# without PCH; for GCC before 13 those three are off where PCH is on. (The fuzz build's clang
# and its address sanitizer still check what they would catch.)
set(pc_pch_quiet "")
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  set(pc_pch_quiet -Wno-array-bounds -Wno-stringop-overflow -Wno-stringop-overread)
endif()
add_library(pc_pch_lib OBJECT ${CMAKE_SOURCE_DIR}/cmake/pch.cc)
target_compile_options(pc_pch_lib PRIVATE ${pc_pch_quiet})
target_link_libraries(pc_pch_lib PRIVATE nlohmann_json::nlohmann_json)
target_precompile_headers(pc_pch_lib PRIVATE ${CMAKE_SOURCE_DIR}/cmake/pch.h)
if(TARGET GTest::gtest)
  add_library(pc_pch_test OBJECT ${CMAKE_SOURCE_DIR}/cmake/pch.cc)
  target_compile_options(pc_pch_test PRIVATE ${pc_pch_quiet} ${PC_TEST_COMPILE_OPTIONS})
  target_link_libraries(pc_pch_test PRIVATE nlohmann_json::nlohmann_json GTest::gtest)
  target_precompile_headers(pc_pch_test PRIVATE ${CMAKE_SOURCE_DIR}/cmake/pch_test.h)
endif()

# The C++ targets defined under `dir` and its subdirectories, into `out`.
function(pc_targets_under dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    pc_targets_under(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

pc_targets_under(${CMAKE_SOURCE_DIR} all_targets)
foreach(t ${all_targets})
  get_target_property(type ${t} TYPE)
  if(t MATCHES "^pc_pch_" OR NOT type MATCHES "^(STATIC_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$")
    continue()
  endif()
  get_target_property(sources ${t} SOURCES)
  if(NOT sources MATCHES "\\.cc(;|$)")
    continue()
  endif()
  target_compile_options(${t} PRIVATE ${pc_pch_quiet})
  get_target_property(libs ${t} LINK_LIBRARIES)
  if(libs MATCHES "GTest::" AND TARGET pc_pch_test)
    target_precompile_headers(${t} REUSE_FROM pc_pch_test)
  else()
    target_precompile_headers(${t} REUSE_FROM pc_pch_lib)
  endif()
endforeach()
