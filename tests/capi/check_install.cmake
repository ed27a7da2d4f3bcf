# Installs the build tree into a scratch prefix, MOVES it to another folder (the install must be
# relocatable: nothing in it may name the folder it was installed into), then builds and runs a
# tiny C consumer against the moved prefix twice: through pkg-config and through
# find_package(shardrec), plus the C++ consumer over the installed shardrec.hpp; then the
# examples, built as a project of their own against it.
set(installed ${WORK_DIR}/installed)
set(prefix ${WORK_DIR}/moved/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/moved)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
  set(out "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${installed})
file(RENAME ${installed} ${prefix})
execute_process(COMMAND grep -rlF ${installed} ${prefix} OUTPUT_VARIABLE naming RESULT_VARIABLE rc)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "installed files name the install folder ${installed}:\n${naming}")
endif()

# 1. pkg-config. shardrec.pc names its prefix relative to its own folder and carries no rpath;
# the program chooses how the loader finds the library (here an rpath to pkg-config's libdir,
# the line docs/bindings.md shows). shardrec-rpath.pc is the same with that rpath.
file(GLOB_RECURSE pcfile ${prefix}/*/shardrec.pc)
if(NOT pcfile)
  message(FATAL_ERROR "shardrec.pc was not installed")
endif()
get_filename_component(pcdir ${pcfile} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pcdir})
execute_process(COMMAND pkg-config --cflags --libs shardrec OUTPUT_VARIABLE flags
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
execute_process(COMMAND pkg-config --variable=libdir shardrec OUTPUT_VARIABLE libdir
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs shardrec failed")
endif()
file(REAL_PATH "${libdir}" libdir_real)
if(flags MATCHES "-Wl|rpath" OR NOT libdir_real STREQUAL "${prefix}/lib")
  message(FATAL_ERROR "shardrec.pc: flags '${flags}', libdir '${libdir}' (want ${prefix}/lib)")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run(cc -std=c99 -Wall -Wextra -Werror ${SOURCE_DIR}/consumer.c ${flags} -Wl,-rpath,${libdir}
    -o ${WORK_DIR}/consumer_pc)
unset(ENV{LD_LIBRARY_PATH})
run(${WORK_DIR}/consumer_pc)
execute_process(COMMAND pkg-config --cflags --libs shardrec-rpath OUTPUT_VARIABLE flags
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT flags MATCHES "-Wl,-rpath,${libdir}( |$)")
  message(FATAL_ERROR "shardrec-rpath.pc: flags '${flags}' (want an rpath to ${libdir})")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
run(cc -std=c99 -Wall -Wextra -Werror ${SOURCE_DIR}/consumer.c ${flags}
    -o ${WORK_DIR}/consumer_pc_rpath)
run(${WORK_DIR}/consumer_pc_rpath)

# The SONAME carries major.minor while 0.x.
execute_process(COMMAND readelf -d ${libdir}/libshardrec.so OUTPUT_VARIABLE dyn)
if(NOT dyn MATCHES "Library soname: \\[libshardrec\\.so\\.${VERSION_MAJOR_MINOR}\\]")
  message(FATAL_ERROR "the SONAME is not libshardrec.so.${VERSION_MAJOR_MINOR}:\n${dyn}")
endif()

# 2. find_package(shardrec) + shardrec::shardrec.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/cmake_build -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake_build)
run(${WORK_DIR}/cmake_build/consumer)
# The C++ consumer (shardrec.hpp): 2 ranks, 3 tables, a bad id on purpose.
run(${WORK_DIR}/cmake_build/consumer_cpp)
if(NOT out MATCHES "final loss" OR NOT out MATCHES "bad id rejected")
  message(FATAL_ERROR "the C++ consumer did not train and reject the bad id:\n${out}")
endif()

# The plugins (when built) are named and versioned like libshardrec (libshardrec_mpi.so.0.1 while
# 0.x: the name the loader opens), and their names before 0.1.x stay as links for one minor.
foreach(plugin shardrec_cuda shardrec_mpi)
  if(NOT EXISTS ${libdir}/lib${plugin}.so)
    continue()
  endif()
  execute_process(COMMAND readelf -d ${libdir}/lib${plugin}.so OUTPUT_VARIABLE dyn)
  if(NOT dyn MATCHES "Library soname: \\[lib${plugin}\\.so\\.${VERSION_MAJOR_MINOR}\\]")
    message(FATAL_ERROR "the SONAME of lib${plugin}.so is not lib${plugin}.so.${VERSION_MAJOR_MINOR}:\n${dyn}")
  endif()
  string(REGEX MATCH "^[0-9]+" major "${VERSION_MAJOR_MINOR}")
  file(REAL_PATH ${libdir}/lib${plugin}.so.${major} old)
  file(REAL_PATH ${libdir}/lib${plugin}.so.${VERSION_MAJOR_MINOR} new)
  if(NOT IS_SYMLINK ${libdir}/lib${plugin}.so.${major} OR NOT old STREQUAL new)
    message(FATAL_ERROR "lib${plugin}.so.${major} (the deprecated name) is not a link to ${new}")
  endif()
  # The moved library opens the plugin next to itself by its new name, and the deprecated name
  # still works where SHARDREC_CUDA_PLUGIN / SHARDREC_MPI_PLUGIN gives it.
  string(REGEX REPLACE "^shardrec_" "" kind ${plugin})
  string(TOUPPER ${kind} KIND)
  foreach(choice default deprecated)
    if(choice STREQUAL "default")
      set(env -E env --unset=SHARDREC_${KIND}_PLUGIN)
      set(want "lib${plugin}\\.so\\.${VERSION_MAJOR_MINOR}")
    else()
      set(env -E env SHARDREC_${KIND}_PLUGIN=${libdir}/lib${plugin}.so.${major})
      set(want "lib${plugin}\\.so\\.${major}([^.0-9]|$)")
    endif()
    execute_process(COMMAND ${CMAKE_COMMAND} ${env} ${WORK_DIR}/cmake_build/plugin_load ${kind}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(kind STREQUAL "mpi")
      # Success is the answer: with SHARDREC_MPI_PLUGIN set, no other file is tried.
      set(want "loaded the MPI plugin")
    endif()
    if(NOT rc EQUAL 0 OR NOT out MATCHES "${want}")
      message(FATAL_ERROR "${plugin}, ${choice} name: the installed library did not load it "
                          "(want '${want}'):\n${out}${err}")
    endif()
    message(STATUS "${plugin} loaded by its ${choice} name: ${out}")
  endforeach()
endforeach()

# The CUDA plugin (when built) has no RUNPATH into the build host's CUDA folder.
if(EXISTS ${libdir}/libshardrec_cuda.so)
  execute_process(COMMAND readelf -d ${libdir}/libshardrec_cuda.so OUTPUT_VARIABLE dyn)
  string(REGEX MATCH "Library runpath: \\[[^]]*\\]" runpath "${dyn}")
  if(NOT runpath STREQUAL "Library runpath: [$ORIGIN]")
    message(FATAL_ERROR "the installed CUDA plugin's RUNPATH is '${runpath}', want only $ORIGIN")
  endif()
endif()

# 3. Version compatibility while 0.x is SameMinorVersion: the installed minor is accepted, an
# older minor is not.
foreach(request ${VERSION_MAJOR_MINOR} 0.0)
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR}/version_check
                          -B ${WORK_DIR}/version_check_${request} -DREQUEST=${request}
                          -DCMAKE_PREFIX_PATH=${prefix}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(request STREQUAL "0.0")
    set(want "found=0")
  else()
    set(want "found=1")
  endif()
  if(NOT "${out}${err}" MATCHES "${want}")
    message(FATAL_ERROR "find_package(shardrec ${request}): want ${want}, got\n${out}${err}")
  endif()
endforeach()

# 4. The examples as a project of their own against the prefix (examples/CMakeLists.txt), as a
# new user copying them would build them; one runs a few steps.
if(EXAMPLES_DIR)
  run(${CMAKE_COMMAND} -S ${EXAMPLES_DIR} -B ${WORK_DIR}/examples -DCMAKE_PREFIX_PATH=${prefix}
      -DCMAKE_BUILD_TYPE=Release)
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/examples -j 2)
  run(${WORK_DIR}/examples/train_sharded/train_sharded --steps 3 --batch 64)
  if(NOT out MATCHES "loss")
    message(FATAL_ERROR "the installed-prefix train_sharded did not train:\n${out}")
  endif()
endif()
