# Installs the build tree into a scratch prefix, moves the prefix to another folder (the install
# is relocatable), and checks the Java artefacts there: the versioned jar
# (manifest, Java 11 classes), its POM and the shardrec.jar link under <prefix>/share/java; the
# example run with only the INSTALLED jar on the class path (the JNI library found under the
# prefix); the jar copied alone into an empty folder outside the prefix (its embedded JNI
# library and libshardrec extracted and loaded); and the error when the library is missing.
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/installed
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed")
endif()
file(RENAME ${WORK_DIR}/installed ${WORK_DIR}/prefix)
set(java_dir ${WORK_DIR}/prefix/share/java)
set(jar ${java_dir}/${JAR_NAME})
foreach(f ${jar} ${java_dir}/shardrec-${VERSION}.pom ${java_dir}/shardrec.jar)
  if(NOT EXISTS ${f})
    message(FATAL_ERROR "${f} was not installed")
  endif()
endforeach()
file(READ ${java_dir}/shardrec-${VERSION}.pom pom)
if(NOT pom MATCHES "<version>${VERSION}</version>")
  message(FATAL_ERROR "the POM does not carry version ${VERSION}")
endif()
execute_process(COMMAND ${JAR_TOOL} xf ${jar} META-INF/MANIFEST.MF
                WORKING_DIRECTORY ${WORK_DIR})
file(READ ${WORK_DIR}/META-INF/MANIFEST.MF manifest)
if(NOT manifest MATCHES "Implementation-Version: ${VERSION}" OR
   NOT manifest MATCHES "Automatic-Module-Name: org.shardrec")
  message(FATAL_ERROR "manifest lacks Implementation-Version or Automatic-Module-Name:\n${manifest}")
endif()

unset(ENV{LD_LIBRARY_PATH})
function(run_java what)
  execute_process(COMMAND ${JAVA} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  message(STATUS "${what}:\n${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run_java("example from the install prefix" -cp ${jar}:${EXAMPLE_CLASSES}
         org.shardrec.examples.TrainSharded)
if(NOT out MATCHES "final loss")
  message(FATAL_ERROR "the Java example did not train from the install prefix")
endif()

# The jar alone in an empty folder (no lib/ above it either).
set(alone ${WORK_DIR}/alone/jar)
file(MAKE_DIRECTORY ${alone} ${WORK_DIR}/alone/tmp)
file(COPY_FILE ${jar} ${alone}/${JAR_NAME})
run_java("jar alone" -Dshardrec.jni.tmpdir=${WORK_DIR}/alone/tmp
         -cp ${alone}/${JAR_NAME}:${EXAMPLE_CLASSES} org.shardrec.JarLoadCheck embedded)
if(NOT out MATCHES "final loss" OR NOT out MATCHES "libraries from ${WORK_DIR}/alone/tmp/")
  message(FATAL_ERROR "the jar did not load its embedded libraries")
endif()
run_java("library missing" -Dshardrec.jni.library=${WORK_DIR}/nonexistent/libshardrec_jni.so
         -cp ${alone}/${JAR_NAME}:${EXAMPLE_CLASSES} org.shardrec.JarLoadCheck missing)
message(STATUS "Java binding loaded from ${WORK_DIR}/prefix and from the jar alone")
