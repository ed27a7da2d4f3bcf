# Every C/C++ file of the project is formatted as .clang-format says (Google style, 100 columns),
# and, where the tools are found, the Go binding as gofmt and the Rust binding as rustfmt (edition
# 2021, default style) write them.
# Run: cmake -DSOURCE_DIR=<repo> -DCLANG_FORMAT=<clang-format> [-DGOFMT=<gofmt>]
#        [-DRUSTFMT=<rustfmt>] -P check_format.cmake
# Generated files (the SWIG cgo wrapper and its Go side) and build trees are skipped.
cmake_minimum_required(VERSION 3.25)
set(files "")
foreach(dir capi impl tests examples bindings)
  file(GLOB_RECURSE found ${SOURCE_DIR}/${dir}/*.c ${SOURCE_DIR}/${dir}/*.cc ${SOURCE_DIR}/${dir}/*.h
       ${SOURCE_DIR}/${dir}/*.hpp ${SOURCE_DIR}/${dir}/*.cu ${SOURCE_DIR}/${dir}/*.cuh)
  list(APPEND files ${found})
endforeach()
list(FILTER files EXCLUDE REGEX "/(target|build[^/]*)/|swig_shardrec_wrap\\.c$")
list(LENGTH files n)
execute_process(COMMAND ${CLANG_FORMAT} --dry-run -Werror --style=file ${files}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message("${err}")
  message(FATAL_ERROR "format: files differ from .clang-format; run clang-format -i on them")
endif()
message("format: ${n} files follow .clang-format")

if(GOFMT)
  file(GLOB_RECURSE go_files ${SOURCE_DIR}/bindings/*.go ${SOURCE_DIR}/examples/*.go
       ${SOURCE_DIR}/tests/*.go)
  list(FILTER go_files EXCLUDE REGEX "/(target|build[^/]*)/|/swig_shardrec\\.go$")
  execute_process(COMMAND ${GOFMT} -l ${go_files} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out STREQUAL "")
    message("${out}${err}")
    message(FATAL_ERROR "format: Go files differ from gofmt; run gofmt -w on them")
  endif()
  list(LENGTH go_files n)
  message("format: ${n} Go files follow gofmt")
else()
  message("format: gofmt not found, Go files not checked")
endif()

if(RUSTFMT)
  file(GLOB_RECURSE rs_files ${SOURCE_DIR}/bindings/*.rs ${SOURCE_DIR}/examples/*.rs
       ${SOURCE_DIR}/tests/*.rs)
  list(FILTER rs_files EXCLUDE REGEX "/(target|build[^/]*)/")
  execute_process(COMMAND ${RUSTFMT} --check --edition 2021 ${rs_files} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(SUBSTRING "${out}" 0 4000 head)
    message("${head}${err}")
    message(FATAL_ERROR "format: Rust files differ from rustfmt; run rustfmt --edition 2021 on them")
  endif()
  list(LENGTH rs_files n)
  message("format: ${n} Rust files follow rustfmt")
else()
  message("format: rustfmt not found, Rust files not checked")
endif()
