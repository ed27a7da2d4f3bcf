# Runs the DLRM example twice with the same arguments (DLRM, ARGS and DIR given by the test):
# every table in memory, then with its largest table tiered (--tiered DIR: rows on disk under a
# cache of a fifth of them). A tiered table gives the bits of the table in memory, so every
# training report and held-out evaluation line must be the same in both runs, and the tiered run
# must report its cache with misses read from disk and write-backs.
foreach(run mem tier)
  set(args ${ARGS})
  if(run STREQUAL "tier")
    file(REMOVE_RECURSE "${DIR}")
    list(APPEND args --tiered "${DIR}")
  endif()
  execute_process(COMMAND ${DLRM} ${args} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message("${out}${err}")
  if(NOT rc EQUAL 0 OR NOT out MATCHES "\ndone\n")
    message(FATAL_ERROR "dlrm (${run}) failed (${rc})")
  endif()
  # The numbers of each report, not its time or speed.
  string(REGEX MATCHALL "train loss [0-9.]+  progressive AUC [0-9.]+|held-out AUC [0-9.]+ [^\n]*" ${run}_lines "${out}")
  set(${run}_out "${out}")
endforeach()
list(LENGTH mem_lines n)
if(n LESS 3)
  message(FATAL_ERROR "expected reports and held-out evaluations, got ${n} lines")
endif()
if(NOT mem_lines STREQUAL tier_lines)
  message(FATAL_ERROR "the tiered run differs from the run in memory:\n${mem_lines}\n---\n${tier_lines}")
endif()
if(NOT tier_out MATCHES "tiered table t[0-9]+: [0-9]+ rows, cache of [0-9]+ slots \\(20% of the rows\\), hit rate 0\\.[0-9]+, disk reads [1-9][0-9]*, write-backs [1-9]")
  message(FATAL_ERROR "no tiered-table line with a 20% cache, disk reads and write-backs")
endif()
file(REMOVE_RECURSE "${DIR}")
list(GET mem_lines -1 last)
message(STATUS "dlrm --tiered: the same ${n} report and evaluation lines as in memory (last: ${last})")
