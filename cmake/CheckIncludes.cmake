# The include test: every #include "X/..." in src/, tools/ and include/promptcache/ checked
# against the layer table of docs/architecture.md, the one place the allowed graph is written.
# A file in folder F may include F itself and any folder of a lower layer; an include of the
# same layer (sideways) or a higher one (up) fails the test, naming the file and line.
# Includes of folders the table does not know (hwy/, nlohmann/: third-party) are not checked.
#
#   cmake -DROOT=<source dir> -P cmake/CheckIncludes.cmake
# Optional: -DDOC=<architecture.md> (default ROOT/docs/architecture.md), -DDIRS="src;tools"
# relative to ROOT (what is scanned; default src, tools and include/promptcache).
if(NOT ROOT)
  message(FATAL_ERROR "CheckIncludes.cmake: pass -DROOT=<source dir>")
endif()
if(NOT DOC)
  set(DOC ${ROOT}/docs/architecture.md)
endif()
if(NOT DIRS)
  set(DIRS src tools include/promptcache)
endif()

# Table rows: "| 3 | `ops/` | ..." (layer, then the folder in backquotes).
file(STRINGS ${DOC} rows REGEX "^\\| *[0-9]+ *\\| *`[a-z_/]+`")
set(folders "")
foreach(row IN LISTS rows)
  string(REGEX MATCH "^\\| *([0-9]+) *\\| *`([a-z_/]+)`" _ "${row}")
  set(layer ${CMAKE_MATCH_1})
  set(path ${CMAKE_MATCH_2})
  # `src/ops/` -> ops; `include/promptcache/` -> promptcache; `tools/` -> tools.
  string(REGEX REPLACE "/$" "" path "${path}")
  get_filename_component(name "${path}" NAME)
  set(layer_of_${name} ${layer})
  list(APPEND folders ${name})
endforeach()
list(LENGTH folders n)
if(n LESS 3)
  message(FATAL_ERROR "${DOC}: no layer table found (rows like \"| 1 | `src/core/` | ... |\")")
endif()

# Every folder of src/ must have a row: a new folder is a decision to write down.
file(GLOB src_dirs LIST_DIRECTORIES true ${ROOT}/src/*)
foreach(d IN LISTS src_dirs)
  if(IS_DIRECTORY ${d})
    get_filename_component(name ${d} NAME)
    if(NOT DEFINED layer_of_${name})
      message(SEND_ERROR "src/${name}/ has no row in the layer table of ${DOC}")
    endif()
  endif()
endforeach()

set(problems 0)
foreach(dir IN LISTS DIRS)
  file(GLOB_RECURSE files ${ROOT}/${dir}/*.h ${ROOT}/${dir}/*.cc)
  foreach(file IN LISTS files)
    file(RELATIVE_PATH rel ${ROOT} ${file})
    # The including folder: src/X/... -> X; tools/... -> tools; include/promptcache/... -> promptcache.
    if(rel MATCHES "^src/([a-z_]+)/")
      set(from ${CMAKE_MATCH_1})
    elseif(rel MATCHES "^include/([a-z_]+)/")
      set(from ${CMAKE_MATCH_1})
    elseif(rel MATCHES "^([a-z_]+)/")
      set(from ${CMAKE_MATCH_1})
    endif()
    if(NOT DEFINED layer_of_${from})
      message(SEND_ERROR "${rel}: its folder '${from}' has no row in the layer table of ${DOC}")
      math(EXPR problems "${problems} + 1")
      continue()
    endif()
    # One list element per line: the characters CMake's lists treat specially go first.
    file(READ ${file} text)
    string(REGEX REPLACE "[];[]" "_" text "${text}")
    string(REPLACE "\\" "/" text "${text}")
    string(REPLACE "\n" ";" lines "${text}")
    set(line_no 0)
    foreach(line IN LISTS lines)
      math(EXPR line_no "${line_no} + 1")
      if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]+\"([a-z_]+)/")
        continue()
      endif()
      set(to ${CMAKE_MATCH_1})
      if(to STREQUAL from OR NOT DEFINED layer_of_${to})
        continue()
      endif()
      if(NOT layer_of_${to} LESS layer_of_${from})
        if(layer_of_${to} EQUAL layer_of_${from})
          set(how "sideways")
        else()
          set(how "up")
        endif()
        message(SEND_ERROR
                "${rel}:${line_no}: includes ${to}/ (layer ${layer_of_${to}}) from ${from}/ "
                "(layer ${layer_of_${from}}): ${how}, which docs/architecture.md does not allow")
        math(EXPR problems "${problems} + 1")
      endif()
    endforeach()
  endforeach()
endforeach()
if(problems GREATER 0)
  message(FATAL_ERROR "${problems} include(s) outside the layer graph of ${DOC}")
endif()
message(STATUS "includes checked against ${n} layer rows of ${DOC}: none goes up or sideways")
