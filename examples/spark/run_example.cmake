# Compiles the Spark example against the pyspark wheel's jars and runs it with spark-submit in
# local-cluster mode (two executor JVMs), with the shardrec jar as its only addition (--jars).
# -DPYTHON= -DJAVA_HOME= -DJAVAC= -DJAR_TOOL= -DSHARDREC_JAR= -DSOURCE_DIR= -DWORK_DIR=
set(pyspark_dir "")
if(PYTHON)
  execute_process(COMMAND "${PYTHON}" -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))"
                  OUTPUT_VARIABLE pyspark_dir OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    set(pyspark_dir "")
  endif()
endif()
if(NOT pyspark_dir OR NOT EXISTS "${pyspark_dir}/bin/spark-submit" OR
   NOT EXISTS "${pyspark_dir}/jars")
  # ctest reports this as skipped (SKIP_REGULAR_EXPRESSION), not as passed.
  message("SHARDREC_SPARK_SKIPPED: pyspark (Spark's jars and spark-submit) is not installed for "
          "'${PYTHON}' (.ci/install-deps installs it)")
  return()
endif()
if(NOT EXISTS "${SHARDREC_JAR}")
  message(FATAL_ERROR "${SHARDREC_JAR} is missing: build the target shardrec_java first")
endif()

# A SPARK_HOME of links to the wheel's bin and jars: local-cluster's workers write their
# application folders under SPARK_HOME/work, which must not be the installed wheel.
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/classes" "${WORK_DIR}/spark_home")
foreach(part bin jars)
  file(CREATE_LINK "${pyspark_dir}/${part}" "${WORK_DIR}/spark_home/${part}" SYMBOLIC)
endforeach()

file(GLOB sources "${SOURCE_DIR}/*.java")
execute_process(COMMAND "${JAVAC}" --release 17 -Xlint:all,-serial,-processing,-path,-try -Werror -d "${WORK_DIR}/classes"
                        -cp "${pyspark_dir}/jars/*:${SHARDREC_JAR}" ${sources}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "javac of the Spark example failed (${rc})")
endif()
execute_process(COMMAND "${JAR_TOOL}" cf "${WORK_DIR}/shardrec-spark-example.jar"
                        -C "${WORK_DIR}/classes" . RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "jar of the Spark example failed (${rc})")
endif()

string(TIMESTAMP start "%s")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env "SPARK_HOME=${WORK_DIR}/spark_home" "JAVA_HOME=${JAVA_HOME}"
          SPARK_LOCAL_IP=127.0.0.1 "${WORK_DIR}/spark_home/bin/spark-submit"
          --master "local-cluster[2,1,1024]" --conf spark.log.level=WARN
          --jars "${SHARDREC_JAR}"
          --class org.shardrec.examples.spark.SparkBarrierTrain
          "${WORK_DIR}/shardrec-spark-example.jar"
  WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE rc)
string(TIMESTAMP end "%s")
math(EXPR seconds "${end} - ${start}")
message("spark-submit ran ${seconds} s")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "spark-submit of the Spark example failed (${rc})")
endif()
