# cmake -P build_jar.cmake: compiles the Java sources of the given folders (the generated proxies are
# known only after SWIG ran, hence at build time) and packs them into a jar.
#   -DJAVAC= -DJAR= -DSOURCE_DIRS=dir|dir -DCLASSES_DIR= -DJAR_FILE= [-DCLASSPATH=a:b]
string(REPLACE "|" ";" dirs "${SOURCE_DIRS}")
set(sources)
foreach(dir IN LISTS dirs)
  file(GLOB found ${dir}/*.java)
  list(APPEND sources ${found})
endforeach()
file(REMOVE_RECURSE ${CLASSES_DIR})
file(MAKE_DIRECTORY ${CLASSES_DIR})
set(classpath_args)
if(CLASSPATH)
  set(classpath_args -classpath ${CLASSPATH})
endif()
execute_process(
  COMMAND ${JAVAC} --release 11 -Xlint:all -Werror -encoding UTF-8 ${classpath_args}
          -d ${CLASSES_DIR} ${sources}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "javac failed (${rc})")
endif()
execute_process(COMMAND ${JAR} cf ${JAR_FILE} -C ${CLASSES_DIR} . RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "jar failed (${rc})")
endif()
