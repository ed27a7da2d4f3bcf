# Installs the build tree into a scratch prefix, then builds and runs a tiny C consumer against
# it twice: through pkg-config and through find_package(shardrec).
set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# 1. pkg-config (the .pc file is relocatable: its prefix is relative to its own folder).
file(GLOB_RECURSE pcfile ${prefix}/*/shardrec.pc)
if(NOT pcfile)
  message(FATAL_ERROR "shardrec.pc was not installed")
endif()
get_filename_component(pcdir ${pcfile} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pcdir})
execute_process(COMMAND pkg-config --cflags --libs shardrec OUTPUT_VARIABLE flags
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs shardrec failed")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run(cc -std=c99 -Wall -Wextra -Werror ${SOURCE_DIR}/consumer.c ${flags} -o ${WORK_DIR}/consumer_pc)
# No LD_LIBRARY_PATH: the rpath from the .pc file must be enough.
unset(ENV{LD_LIBRARY_PATH})
run(${WORK_DIR}/consumer_pc)

# 2. find_package(shardrec) + shardrec::shardrec.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/cmake_build -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake_build)
run(${WORK_DIR}/cmake_build/consumer)
