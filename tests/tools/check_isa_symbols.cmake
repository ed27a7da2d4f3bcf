# The files built for a wider instruction set than the library (kernels/isa/*_avx2.cc,
# *_avx512.cc, comm/codec/codec_avx2.cc) must not define any inline function of the library or
# the standard library: the linker keeps one copy of each weak definition, and an AVX copy could
# then be what baseline code calls on a CPU without AVX. Checked on the built objects: none may
# define a weak symbol (nm types W, V, u) other than data the compiler emits for type checks
# (typeinfo and vtables: UBSan's function checks make them; they hold no instructions).
# Run: cmake -DBINARY_DIR=<build> -DNM=<nm> -P check_isa_symbols.cmake. Fails on any.
cmake_minimum_required(VERSION 3.25)

file(GLOB_RECURSE objects "${BINARY_DIR}/*_avx2.cc.o" "${BINARY_DIR}/*_avx512.cc.o")
if(NOT objects)
  message(STATUS "no objects built for a wider instruction set (not x86-64): nothing to check")
  return()
endif()
set(violations "")
foreach(obj IN LISTS objects)
  execute_process(COMMAND ${NM} ${obj} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm failed on ${obj}")
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    if(line MATCHES "^[0-9a-fA-F]* +[WVu] " AND NOT line MATCHES " _ZT[ISV]")
      string(APPEND violations "${obj}: ${line}\n")
    endif()
  endforeach()
endforeach()
list(LENGTH objects n)
if(violations)
  message(FATAL_ERROR "weak definitions in objects built for AVX2/AVX-512:\n${violations}")
endif()
message(STATUS "${n} objects built for AVX2/AVX-512 define no weak symbol")
