# The installable library (docs/library.md): `cmake --install build --prefix DIR` puts the public
# headers in DIR/include/promptcache, one static libpromptcache.a (every internal library's
# objects: the engine, without the HTTP server) in DIR/lib, a CMake package (find_package
# (promptcache) -> promptcache::promptcache) and a pkg-config file beside it, and the CLI in
# DIR/bin. Nothing else installs: no tests, fuzzers or data.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The engine's parts, the objects of libpromptcache.a. The server (pc_server, pc_server_api)
# stays out: it needs cpp-httplib and OpenSSL, and the CLI serves it.
set(PC_LIBRARY_PARTS pc_core pc_gguf pc_ops pc_tokenizer pc_kv pc_kv_redis pc_model pc_jinja
    pc_chat pc_sampling pc_pml pc_grammar pc_engine)

# What those parts link, under names of our own so that the package's config file can make the
# same imported targets in a user's project without clashing with theirs.
pkg_check_modules(PC_DEP_XXHASH REQUIRED IMPORTED_TARGET libxxhash)
pkg_check_modules(PC_DEP_PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(PC_DEP_UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
pkg_check_modules(PC_DEP_HIREDIS REQUIRED IMPORTED_TARGET hiredis)

# The target is promptcache_lib (the CLI is `promptcache`); users see promptcache::promptcache.
add_library(promptcache_lib STATIC)
foreach(part ${PC_LIBRARY_PARTS})
  target_sources(promptcache_lib PRIVATE $<TARGET_OBJECTS:${part}>)
endforeach()
set_target_properties(promptcache_lib PROPERTIES OUTPUT_NAME promptcache EXPORT_NAME promptcache)
target_include_directories(promptcache_lib INTERFACE
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(promptcache_lib INTERFACE cxx_std_20)
# Link-only dependencies: no public header includes theirs.
target_link_libraries(promptcache_lib PRIVATE Threads::Threads hwy::hwy pugixml::pugixml
    PkgConfig::PC_DEP_XXHASH PkgConfig::PC_DEP_PCRE2 PkgConfig::PC_DEP_UTF8PROC
    PkgConfig::PC_DEP_HIREDIS)

install(TARGETS promptcache_lib EXPORT promptcacheTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/promptcache
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_BINARY_DIR}/include/promptcache/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/promptcache)
if(TARGET promptcache)
  install(TARGETS promptcache RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(PC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/promptcache)
install(EXPORT promptcacheTargets NAMESPACE promptcache:: DESTINATION ${PC_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/promptcacheConfig.cmake.in
    ${PROJECT_BINARY_DIR}/promptcacheConfig.cmake INSTALL_DESTINATION ${PC_CMAKE_DIR})
# Before 1.0 a minor version may change the API (docs/library.md): only the same minor matches.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/promptcacheConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/promptcacheConfig.cmake
        ${PROJECT_BINARY_DIR}/promptcacheConfigVersion.cmake DESTINATION ${PC_CMAKE_DIR})

# pkg-config: relocatable (paths from the .pc file's own folder); static linking needs
# --static, which adds Requires.private and Libs.private.
file(RELATIVE_PATH PC_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" PC_PC_TO_PREFIX "${PC_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/promptcache.pc.in
               ${PROJECT_BINARY_DIR}/promptcache.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/promptcache.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

if(PC_TESTS)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/install ${PROJECT_BINARY_DIR}/tests/install)
endif()
