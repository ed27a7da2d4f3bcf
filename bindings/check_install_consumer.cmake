# Installs the build tree into a scratch prefix outside the checkout, copies one consumer
# program (LANG: rust, go or cxx) into a scratch folder next to it, and builds and runs it with
# nothing but the prefix: no PKG_CONFIG_PATH, no LD_LIBRARY_PATH, the only settings being the
# ones docs/bindings.md gives. -DBUILD_DIR, -DCONSUMER (the program's source), -DTOOL (cargo or go).
if(DEFINED ENV{TMPDIR})
  set(tmp $ENV{TMPDIR})
else()
  set(tmp /tmp)
endif()
string(RANDOM LENGTH 10 tag)
set(root ${tmp}/shardrec-${LANG}-consumer-${tag})
set(prefix ${root}/prefix)
set(app ${root}/app)
file(REMOVE_RECURSE ${root})
file(MAKE_DIRECTORY ${app})

function(run)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${app}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
unset(ENV{PKG_CONFIG_PATH})
unset(ENV{LD_LIBRARY_PATH})
get_filename_component(tool_dir "${TOOL}" DIRECTORY)
set(ENV{PATH} "${tool_dir}:$ENV{PATH}")

if(LANG STREQUAL "rust")
  # The Cargo.toml line docs/bindings.md gives: a path dependency under the prefix.
  file(WRITE ${app}/Cargo.toml "[package]
name = \"consumer\"
version = \"0.1.0\"
edition = \"2021\"

[dependencies]
shardrec = { path = \"${prefix}/share/shardrec/rust/shardrec\" }
")
  configure_file(${CONSUMER} ${app}/src/main.rs COPYONLY)
  set(ENV{CARGO_TARGET_DIR} ${root}/target)
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
message(STATUS "${LANG} consumer built and ran from ${prefix} alone (${line})")
file(REMOVE_RECURSE ${root})
