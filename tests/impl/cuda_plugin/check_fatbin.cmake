# Compile gate on the built plugin (cmake -P): its fatbin must hold device code for every
# architecture the build asked for, and no kernel may use a stack frame or local memory (the
# ptxas gate in cuda.cmake refuses spills at compile time; this checks what was linked, with the
# tool a user would use). Register counts are written to REPORT for the record.
# -DCUOBJDUMP=<path or empty> -DPLUGIN=<libshardrec_cuda.so> -DARCHS="80;90" -DREPORT=<file>
if(NOT CUOBJDUMP OR NOT EXISTS "${CUOBJDUMP}")
  # ctest reports this as skipped (SKIP_REGULAR_EXPRESSION), not as passed.
  message("SKIP: cuobjdump not found (.ci/install-deps installs it from PyPI)")
  return()
endif()

string(REGEX REPLACE "-(real|virtual)" "" ARCHS "${ARCHS}")
execute_process(COMMAND "${CUOBJDUMP}" --list-elf "${PLUGIN}"
                OUTPUT_VARIABLE elves ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cuobjdump --list-elf ${PLUGIN} failed (${rc}): ${err}")
endif()
foreach(arch IN LISTS ARCHS)
  if(NOT elves MATCHES "sm_${arch}")
    message(FATAL_ERROR "the plugin holds no sm_${arch} code; cuobjdump --list-elf:\n${elves}")
  endif()
endforeach()

execute_process(COMMAND "${CUOBJDUMP}" --dump-resource-usage "${PLUGIN}"
                OUTPUT_VARIABLE usage ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cuobjdump --dump-resource-usage ${PLUGIN} failed (${rc}): ${err}")
endif()
string(REGEX MATCHALL "REG:[0-9]+" regs "${usage}")
list(LENGTH regs kernels)
if(kernels EQUAL 0)
  message(FATAL_ERROR "no kernel resource usage found in ${PLUGIN}:\n${usage}")
endif()

# One line per function: the name line precedes its resource line in cuobjdump's output.
string(REPLACE "\n" ";" lines "${usage}")
set(function "")
set(offenders "")
foreach(line IN LISTS lines)
  if(line MATCHES "Function ([^:]+):")
    set(function "${CMAKE_MATCH_1}")
  elseif(line MATCHES "STACK:([0-9]+)" AND NOT CMAKE_MATCH_1 EQUAL 0)
    string(APPEND offenders "  ${function}: ${line}\n")
  elseif(line MATCHES "LOCAL:([0-9]+)" AND NOT CMAKE_MATCH_1 EQUAL 0)
    string(APPEND offenders "  ${function}: ${line}\n")
  endif()
endforeach()
if(offenders)
  message(FATAL_ERROR "kernels with a stack frame or local memory:\n${offenders}")
endif()

set(max_regs 0)
foreach(r IN LISTS regs)
  string(REPLACE "REG:" "" n "${r}")
  if(n GREATER max_regs)
    set(max_regs ${n})
  endif()
endforeach()
file(WRITE "${REPORT}" "${elves}\n${usage}")
string(REPLACE ";" ", sm_" arch_list "sm_${ARCHS}")
message("fatbin: ${arch_list} present; ${kernels} kernel entries, none with stack or local "
        "memory; at most ${max_regs} registers per thread (full listing: ${REPORT})")
