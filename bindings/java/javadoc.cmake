# cmake -P javadoc.cmake: Javadoc of the public classes of org.attnrt.
#   -DJAVADOC= -DSOURCE_DIRS=dir|dir -DOUTPUT_DIR=
string(REPLACE "|" ";" dirs "${SOURCE_DIRS}")
set(sources)
foreach(dir IN LISTS dirs)
  file(GLOB found ${dir}/*.java)
  list(APPEND sources ${found})
endforeach()
execute_process(
  COMMAND ${JAVADOC} -quiet -encoding UTF-8 -Xdoclint:none -public -d ${OUTPUT_DIR} ${sources}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "javadoc failed (${rc})")
endif()
