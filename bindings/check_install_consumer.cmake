# Installs the build tree into a scratch prefix outside the checkout, MOVES the prefix to another
# folder (nothing may name the folder it was installed into), copies one consumer program
# (LANG: rust, go or cxx) into a scratch folder next to it, and builds and runs it from the moved
# prefix with only the settings docs/bindings.md gives and no LD_LIBRARY_PATH. Rust builds twice:
# with the crates inside the prefix (they find it by themselves), and with the crates copied out
# of it (SHARDREC_PREFIX names it; without it the build stops with a message saying so). Go's
# build without PKG_CONFIG_PATH must stop naming the variable. -DBUILD_DIR, -DCONSUMER (the
# program's source), -DTOOL (cargo or go).
if(DEFINED ENV{TMPDIR})
  set(tmp $ENV{TMPDIR})
else()
  set(tmp /tmp)
endif()
file(REAL_PATH ${tmp} tmp)
string(RANDOM LENGTH 10 tag)
set(root ${tmp}/shardrec-${LANG}-consumer-${tag})
set(installed ${root}/installed)
set(prefix ${root}/moved/prefix)
set(app ${root}/app)
file(REMOVE_RECURSE ${root})
file(MAKE_DIRECTORY ${app} ${root}/moved)

function(run)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${app}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

# A command that must fail, with output matching each of the regular expressions after MATCH.
function(run_fails)
  cmake_parse_arguments(ARG "" "" "COMMAND;MATCH" ${ARGN})
  execute_process(COMMAND ${ARG_COMMAND} WORKING_DIRECTORY ${app}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "succeeded but should have failed: ${ARG_COMMAND}\n${out}\n${err}")
  endif()
  foreach(re IN LISTS ARG_MATCH)
    if(NOT "${out}${err}" MATCHES "${re}")
      message(FATAL_ERROR "${ARG_COMMAND}: the failure does not say '${re}':\n${out}\n${err}")
    endif()
  endforeach()
  message(STATUS "refused as expected: ${ARG_COMMAND}")
  set(out "${out}${err}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${installed})
file(RENAME ${installed} ${prefix})
unset(ENV{PKG_CONFIG_PATH})
unset(ENV{LD_LIBRARY_PATH})
get_filename_component(tool_dir "${TOOL}" DIRECTORY)
set(ENV{PATH} "${tool_dir}:$ENV{PATH}")

if(LANG STREQUAL "rust")
  configure_file(${CONSUMER} ${app}/src/main.rs COPYONLY)
  set(ENV{CARGO_TARGET_DIR} ${root}/target)
  unset(ENV{SHARDREC_PREFIX})
  # The Cargo.toml line docs/bindings.md gives: a path dependency under the (moved) prefix.
  function(write_manifest crates)
    file(WRITE ${app}/Cargo.toml "[package]
name = \"consumer\"
version = \"0.1.0\"
edition = \"2021\"

[dependencies]
shardrec = { path = \"${crates}/shardrec\" }
")
  endfunction()
  write_manifest(${prefix}/share/shardrec/rust)
  run(${TOOL} build --offline)
  # The crates copied (vendored) out of the prefix: found through SHARDREC_PREFIX only.
  file(COPY ${prefix}/share/shardrec/rust/ DESTINATION ${root}/vendored)
  write_manifest(${root}/vendored)
  run_fails(COMMAND ${TOOL} build --offline
            MATCH "shardrec-sys: cannot find libshardrec" "Set SHARDREC_PREFIX")
  if(out MATCHES "panicked|RUST_BACKTRACE")
    message(FATAL_ERROR "the build script panicked instead of explaining:\n${out}")
  endif()
  set(ENV{SHARDREC_PREFIX} ${root}/nonexistent)
  run_fails(COMMAND ${TOOL} build --offline MATCH "SHARDREC_PREFIX is ${root}/nonexistent")
  # Relative to the app folder it would name the prefix, but build scripts run elsewhere.
  file(RELATIVE_PATH relative ${app} ${prefix})
  set(ENV{SHARDREC_PREFIX} ${relative})
  run_fails(COMMAND ${TOOL} build --offline MATCH "SHARDREC_PREFIX must be an absolute path")
  set(ENV{SHARDREC_PREFIX} ${prefix})
  run(${TOOL} build --offline)
  set(program ${root}/target/debug/consumer)
elseif(LANG STREQUAL "go")
  # The settings docs/bindings.md gives: the module proxy under the prefix, no checksum database.
  set(ENV{GOPROXY} file://${prefix}/share/shardrec/goproxy)
  set(ENV{GONOSUMDB} ${MODULE})
  set(ENV{GOPATH} ${root}/gopath)
  set(ENV{GOCACHE} ${root}/gocache)
  set(ENV{GOTOOLCHAIN} local)
  set(ENV{GOFLAGS} -buildvcs=false)
  configure_file(${CONSUMER} ${app}/main.go COPYONLY)
  run(${TOOL} mod init example.com/consumer)
  run(${TOOL} get ${MODULE}@v${VERSION})
  # The module names no path: pkg-config finds the prefix through PKG_CONFIG_PATH, and says so
  # when it is not set.
  run_fails(COMMAND ${TOOL} build -o ${root}/consumer .
            MATCH "shardrec-rpath" "PKG_CONFIG_PATH")
  set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
  run(${TOOL} build -o ${root}/consumer .)
  set(program ${root}/consumer)
elseif(LANG STREQUAL "cxx")
  configure_file(${CONSUMER} ${app}/main.cc COPYONLY)
  file(WRITE ${app}/CMakeLists.txt "cmake_minimum_required(VERSION 3.25)
project(consumer LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(shardrec ${VERSION} REQUIRED)
add_executable(consumer main.cc)
target_link_libraries(consumer PRIVATE shardrec::shardrec)
")
  run(${CMAKE_COMMAND} -S ${app} -B ${root}/build -DCMAKE_PREFIX_PATH=${prefix})
  run(${CMAKE_COMMAND} --build ${root}/build)
  set(program ${root}/build/consumer)
else()
  message(FATAL_ERROR "LANG must be rust, go or cxx")
endif()

# The program finds libshardrec under the prefix, not in the build tree.
execute_process(COMMAND ldd ${program} OUTPUT_VARIABLE ldd)
string(REGEX MATCH "[^\n]*libshardrec[^\n]*" line "${ldd}")
if(NOT line MATCHES "${prefix}/")
  message(FATAL_ERROR "${program} does not load libshardrec from ${prefix}:\n${ldd}")
endif()
run(${program})
if(NOT out MATCHES "final loss")
  message(FATAL_ERROR "the ${LANG} consumer did not train:\n${out}")
endif()
message(STATUS "${out}")
message(STATUS "${LANG} consumer built and ran from the moved prefix ${prefix} (${line})")
file(REMOVE_RECURSE ${root})
