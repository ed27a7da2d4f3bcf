# Regenerates the committed SWIG cgo wrappers (swig_shardrec.go, swig_shardrec_wrap.c) into
# GO_DIR/internal/swig (MODE=write), or checks that the committed ones equal a fresh generation (MODE=check).
set(tmp ${WORK_DIR}/swig_go_gen)
file(REMOVE_RECURSE ${tmp})
file(MAKE_DIRECTORY ${tmp})
execute_process(
  COMMAND ${SWIG} -go -cgo -package swig -intgosize 64 -DSWIGWORDSIZE64 -w451,314
          -I${SOURCE_ROOT}/capi/include -I${BINARY_ROOT}/capi/include -I${SOURCE_ROOT}/bindings/swig
          -outdir ${tmp} -o ${tmp}/swig_shardrec_wrap.c shardrec_go.i
  # A relative input keeps the checkout's absolute path out of the generated files' headers.
  WORKING_DIRECTORY ${GO_DIR}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "swig failed (${rc})")
endif()
file(RENAME ${tmp}/shardrec.go ${tmp}/swig_shardrec.go)
set(stale)
foreach(f swig_shardrec.go swig_shardrec_wrap.c)
  if(MODE STREQUAL "write")
    file(COPY_FILE ${tmp}/${f} ${GO_DIR}/internal/swig/${f} ONLY_IF_DIFFERENT)
  else()
    execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${tmp}/${f} ${GO_DIR}/internal/swig/${f}
                    RESULT_VARIABLE differ)
    if(NOT differ EQUAL 0)
      list(APPEND stale ${f})
    endif()
  endif()
endforeach()
if(stale)
  message(FATAL_ERROR "stale SWIG wrappers in ${GO_DIR}/internal/swig: ${stale}; "
                      "run: cmake --build <build> --target shardrec_go_swig")
endif()
message(STATUS "SWIG Go wrappers ${MODE}: ok")
