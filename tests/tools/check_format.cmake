# Every C/C++ file of the project is formatted as .clang-format says (Google style, 100 columns).
# Run: cmake -DSOURCE_DIR=<repo> -DCLANG_FORMAT=<clang-format> -P check_format.cmake
# Generated files (the SWIG cgo wrapper) and build trees are skipped.
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
