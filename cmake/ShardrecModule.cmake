# shardrec_add_module(<name> SOURCES ... [DEPS ...] [PUBLIC_LIBS ...])
# Each impl module is a static, position-independent library `shardrec_<name>`, so a module's
# tests link only what the module may use (the layering rule, docs/design.md section 3).
function(shardrec_add_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PUBLIC_LIBS" ${ARGN})
  if(ARG_SOURCES)
    add_library(shardrec_${name} STATIC ${ARG_SOURCES})
    set(scope PUBLIC)
  else()
    add_library(shardrec_${name} INTERFACE)
    set(scope INTERFACE)
  endif()
  target_include_directories(shardrec_${name} ${scope}
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/capi/include>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/capi/include>)
  foreach(dep IN LISTS ARG_DEPS)
    target_link_libraries(shardrec_${name} ${scope} shardrec_${dep})
  endforeach()
  if(ARG_PUBLIC_LIBS)
    target_link_libraries(shardrec_${name} ${scope} ${ARG_PUBLIC_LIBS})
  endif()
  if(ARG_SOURCES)
    set_target_properties(shardrec_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON
      CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
    target_compile_options(shardrec_${name} PRIVATE ${SHARDREC_WARNINGS} ${SHARDREC_FUZZ_COVERAGE})
  endif()
endfunction()

# The options every test source compiles with; the shared precompiled header (tests/CMakeLists.txt)
# is built with the same ones, which GCC requires of a header it reuses.
function(shardrec_test_compile_options target)
  target_compile_options(${target} PRIVATE ${SHARDREC_WARNINGS})
  # With the header precompiled, GCC 12 reports -Wstringop-overflow and -Warray-bounds inside
  # libstdc++'s std::string copies (the GCC bug 105329 family the top-level -Wno-restrict is
  # for); they point at no code of ours.
  if(SHARDREC_TEST_PCH AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU"
     AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-stringop-overflow -Wno-array-bounds)
  endif()
endfunction()

# shardrec_add_test(<name> SOURCES ... LIBS ... [LABELS ...] [TIMEOUT s] [SHARDS n])
# One GoogleTest binary, registered with ctest under its own name; with SHARDS n > 1 as n ctest
# tests <name>_shard<i>, each running every n-th case (GoogleTest's own sharding), so that one
# long suite spreads over `ctest -j` instead of being the run's last straggler.
function(shardrec_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;SHARDS" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} shardrec_test_support GTest::gtest)
  shardrec_test_compile_options(${name})
  if(SHARDREC_TEST_PCH)
    target_precompile_headers(${name} REUSE_FROM shardrec_test_pch)
    # The shared header is C++ only; C sources compiled into a test (an example's model) go without.
    foreach(src IN LISTS ARG_SOURCES)
      if(src MATCHES "\\.c$")
        set_source_files_properties(${src} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
      endif()
    endforeach()
  endif()
  if(NOT ARG_SHARDS)
    set(ARG_SHARDS 1)
  endif()
  set(tests ${name})
  if(ARG_SHARDS GREATER 1)
    set(tests "")
    math(EXPR last "${ARG_SHARDS} - 1")
    foreach(i RANGE ${last})
      add_test(NAME ${name}_shard${i} COMMAND ${name})
      set_tests_properties(${name}_shard${i} PROPERTIES
        ENVIRONMENT "GTEST_TOTAL_SHARDS=${ARG_SHARDS};GTEST_SHARD_INDEX=${i}")
      list(APPEND tests ${name}_shard${i})
    endforeach()
  else()
    add_test(NAME ${name} COMMAND ${name})
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  # Sanitized builds run several times slower (and CI machines vary); the limits are set for a
  # release build, so they are scaled here rather than loosened for every build.
  if(SHARDREC_SANITIZE)
    math(EXPR ARG_TIMEOUT "${ARG_TIMEOUT} * 4")
  endif()
  set_tests_properties(${tests} PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
endfunction()
