# The library_install test (cmake -P; tests/install/CMakeLists.txt passes the variables):
#   1. `cmake --install BUILD_DIR --prefix WORK_DIR/prefix`, and the prefix holds exactly the
#      headers, libpromptcache.a, the CMake package, the pkg-config file and the CLI;
#   2. every installed header compiles on its own with only the prefix on the include path, and
#      includes nothing but standard headers and other promptcache/ headers;
#   3. examples/embed, copied out of the source tree, is configured and built with
#      find_package(promptcache) from the prefix, and once more with the compiler and
#      `pkg-config --cflags --libs --static promptcache`;
#   4. both binaries' greedy continuation of a prompt on stories260K equals the installed CLI's
#      (`promptcache run --temp 0`, through the Engine the CLI builds over its own loaded model),
#      and the second, cached run of the example equals its first.
cmake_minimum_required(VERSION 3.25)

foreach(var BUILD_DIR SOURCE_DIR WORK_DIR MODEL VERSION CXX GENERATOR PKG_CONFIG)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_test.cmake needs -D${var}=...")
  endif()
endforeach()
if(NOT EXISTS ${MODEL})
  message(FATAL_ERROR "no model at ${MODEL} (../shared/models beside the repository)")
endif()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

# Runs a command; fails the test with its output unless it exits 0. OUTPUT_VARIABLE: stdout.
function(run_checked what)
  cmake_parse_arguments(R "" "OUTPUT_VARIABLE;ERROR_VARIABLE" "COMMAND" ${ARGN})
  execute_process(COMMAND ${R_COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${R_COMMAND}")
    message(FATAL_ERROR "${what} failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
  if(R_OUTPUT_VARIABLE)
    set(${R_OUTPUT_VARIABLE} "${out}" PARENT_SCOPE)
  endif()
  if(R_ERROR_VARIABLE)
    set(${R_ERROR_VARIABLE} "${err}" PARENT_SCOPE)
  endif()
endfunction()

# 1. Install, and nothing but what the package promises.
run_checked("cmake --install" COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
file(GLOB_RECURSE installed LIST_DIRECTORIES false RELATIVE ${prefix} ${prefix}/*)
file(GLOB public_headers RELATIVE ${SOURCE_DIR}/include ${SOURCE_DIR}/include/promptcache/*.h)
set(expected bin/promptcache include/promptcache/version.h lib/libpromptcache.a
    lib/pkgconfig/promptcache.pc lib/cmake/promptcache/promptcacheConfig.cmake
    lib/cmake/promptcache/promptcacheConfigVersion.cmake
    lib/cmake/promptcache/promptcacheTargets.cmake)
foreach(h ${public_headers})
  list(APPEND expected include/${h})
endforeach()
set(unexpected ${installed})
list(FILTER unexpected EXCLUDE REGEX "^lib/cmake/promptcache/promptcacheTargets-[a-z]+\\.cmake$")
list(REMOVE_ITEM unexpected ${expected})
if(unexpected)
  message(FATAL_ERROR "installed beyond the package: ${unexpected}")
endif()
foreach(f ${expected})
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
list(LENGTH installed n_installed)
message(STATUS "installed ${n_installed} files into ${prefix}")

# 2. Headers: self-contained, and no includes from src/ or third-party libraries.
file(GLOB headers RELATIVE ${prefix}/include ${prefix}/include/promptcache/*.h)
set(header_sources "")
foreach(h ${headers})
  file(STRINGS ${prefix}/include/${h} includes REGEX "^[ \t]*#[ \t]*include")
  foreach(line ${includes})
    if(NOT line MATCHES "^#include (<[a-z_]+>|\"promptcache/[a-z_]+\\.h\")$")
      message(FATAL_ERROR "${h}: '${line}': a public header includes only standard headers and "
                          "promptcache/ ones")
    endif()
  endforeach()
  string(REPLACE "/" "_" stem ${h})
  # Twice: its include guard must hold too.
  file(WRITE ${WORK_DIR}/headers/${stem}.cc "#include <${h}>\n#include <${h}>\n")
  list(APPEND header_sources ${WORK_DIR}/headers/${stem}.cc)
endforeach()
run_checked("compiling each public header alone"
            COMMAND ${CXX} -std=c++20 -fsyntax-only -Wall -Wextra -Werror -I${prefix}/include
                    ${header_sources})
list(LENGTH headers n_headers)
message(STATUS "${n_headers} public headers compile on their own")

# 3a. The example through find_package, from a copy outside the source tree.
file(COPY ${SOURCE_DIR}/examples/embed DESTINATION ${WORK_DIR})
set(configure_args -S ${WORK_DIR}/embed -B ${WORK_DIR}/embed-cmake -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${prefix})
if(CXX_LAUNCHER)
  list(APPEND configure_args -DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER})
endif()
run_checked("configuring examples/embed" COMMAND ${CMAKE_COMMAND} ${configure_args})
file(STRINGS ${WORK_DIR}/embed-cmake/CMakeCache.txt found_dir REGEX "^promptcache_DIR:")
if(NOT found_dir STREQUAL "promptcache_DIR:PATH=${prefix}/lib/cmake/promptcache")
  message(FATAL_ERROR "find_package found another promptcache: ${found_dir}")
endif()
run_checked("building examples/embed"
            COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/embed-cmake -j2)

# 3b. The same source through pkg-config, static.
set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
run_checked("pkg-config" OUTPUT_VARIABLE pc_flags
            COMMAND ${PKG_CONFIG} --cflags --libs --static promptcache)
string(STRIP "${pc_flags}" pc_flags)
run_checked("pkg-config --modversion" OUTPUT_VARIABLE pc_version
            COMMAND ${PKG_CONFIG} --modversion promptcache)
string(STRIP "${pc_version}" pc_version)
if(NOT pc_version STREQUAL VERSION)
  message(FATAL_ERROR "promptcache.pc says version ${pc_version}, the project ${VERSION}")
endif()
separate_arguments(pc_list UNIX_COMMAND "${pc_flags}")
run_checked("building examples/embed with pkg-config"
            COMMAND ${CXX} -std=c++20 -O2 ${WORK_DIR}/embed/main.cc -o ${WORK_DIR}/embed-pc
                    ${pc_list})
message(STATUS "pkg-config --cflags --libs --static promptcache: ${pc_flags}")

# 4. Same text as the CLI, from both builds; version from version.h.
set(prompt "Once upon a time, there was a little girl named Lily. She loved to play outside")
set(tokens 40)
run_checked("the CLI" OUTPUT_VARIABLE cli_text
            COMMAND ${prefix}/bin/promptcache run -m ${MODEL} -p ${prompt} --temp 0 -n ${tokens})
string(STRIP "${cli_text}" cli_stripped)
string(LENGTH "${cli_stripped}" cli_length)
if(cli_length LESS 20)
  message(FATAL_ERROR "the CLI wrote too little to compare with: '${cli_text}'")
endif()
foreach(binary ${WORK_DIR}/embed-cmake/embed ${WORK_DIR}/embed-pc)
  run_checked("${binary} --version" OUTPUT_VARIABLE got_version COMMAND ${binary} --version)
  string(STRIP "${got_version}" got_version)
  if(NOT got_version STREQUAL VERSION)
    message(FATAL_ERROR "${binary} reports version '${got_version}', the project ${VERSION}")
  endif()
  run_checked("${binary}" OUTPUT_VARIABLE text ERROR_VARIABLE log
              COMMAND ${binary} ${MODEL} ${prompt} ${tokens})
  if(NOT text STREQUAL cli_text)
    message(FATAL_ERROR "${binary} wrote\n'${text}'\nthe CLI\n'${cli_text}'")
  endif()
  if(NOT log MATCHES "second run: ([0-9]+) of ([0-9]+) prompt tokens from the cache" OR
     CMAKE_MATCH_1 EQUAL 0)
    message(FATAL_ERROR "${binary}: the second run reused no cached prefix:\n${log}")
  endif()
endforeach()
message(STATUS "both builds of examples/embed continue the prompt as the CLI does: '${cli_stripped}'")
