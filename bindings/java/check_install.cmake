# Installs the build tree into a scratch prefix and runs the Java example with only the
# INSTALLED jar on the class path: the JNI library must be found under the prefix.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed")
endif()
file(GLOB jar ${WORK_DIR}/prefix/share/java/shardrec.jar)
if(NOT jar)
  message(FATAL_ERROR "shardrec.jar was not installed under share/java")
endif()
unset(ENV{LD_LIBRARY_PATH})
execute_process(COMMAND ${JAVA} -cp ${jar}:${EXAMPLE_CLASSES} org.shardrec.examples.TrainSharded
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "final loss")
  message(FATAL_ERROR "the Java example failed from the install prefix (${rc}):\n${out}\n${err}")
endif()
message(STATUS "Java binding loaded from ${WORK_DIR}/prefix")
