# cmake -P check_docs.cmake -DDOC=docs/java.md -DEXAMPLES_DIR=examples/java: every example block of
# the doc, written as
#   <!-- example: NAME.java -->
#   ```java
#   ...the file, verbatim...
#   ```
# must equal EXAMPLES_DIR/NAME.java (which ctest compiles and runs as examples.java.NAME), so the
# doc's code cannot go stale.
file(READ ${DOC} doc)
string(REGEX MATCHALL "<!-- example: [A-Za-z0-9_]+\\.java -->" markers "${doc}")
if(NOT markers)
  message(FATAL_ERROR "${DOC}: no <!-- example: NAME.java --> blocks")
endif()
foreach(marker IN LISTS markers)
  string(REGEX REPLACE "<!-- example: (.*) -->" "\\1" name "${marker}")
  file(READ ${EXAMPLES_DIR}/${name} source)
  set(expected "${marker}\n```java\n${source}```\n")
  string(FIND "${doc}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${DOC}: the block after '${marker}' is not ${EXAMPLES_DIR}/${name} verbatim "
                        "(copy the file between the ```java fences)")
  endif()
  message(STATUS "${name}: the doc matches the file")
endforeach()
