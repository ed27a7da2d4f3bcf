# Compiles every .java file under SOURCE_DIRS ('|'-separated) into CLASSES, then (when OUTPUT is
# set) packs them into a jar. A script, because the SWIG-generated file list is known only
# after SWIG ran.
string(REPLACE "|" ";" dirs "${SOURCE_DIRS}")
set(sources)
foreach(dir IN LISTS dirs)
  file(GLOB_RECURSE found ${dir}/*.java)
  list(APPEND sources ${found})
endforeach()
file(REMOVE_RECURSE ${CLASSES})
file(MAKE_DIRECTORY ${CLASSES})
list(JOIN sources "\n" argfile)
file(WRITE ${CLASSES}.args "${argfile}\n")
set(cp_args)
if(CLASSPATH)
  set(cp_args -cp ${CLASSPATH})
endif()
execute_process(COMMAND ${JAVAC} --release 17 -Xlint:-options -encoding UTF-8 ${cp_args}
                        -d ${CLASSES} @${CLASSES}.args
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "javac failed (${rc})")
endif()
if(OUTPUT)
  execute_process(COMMAND ${JAR} cf ${OUTPUT} -C ${CLASSES} . RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "jar failed (${rc})")
  endif()
endif()
