# Fails when a test name that gtest_discover_tests registered in DIR (the *_tests.cmake files it
# writes) carries a parameter byte dump ("# GetParam() = 48-byte object <...>") instead of the
# case's name. Run as: cmake -DDIR=<build dir> -P scripts/check_test_names.cmake
# (It reads the files rather than running `ctest -N`, which would replace the log of the ctest run
# it is part of, the log scripts/ctest_skips.py reads.)
file(GLOB lists "${DIR}/*_tests.cmake")
if(NOT lists)
  message(FATAL_ERROR "no *_tests.cmake in ${DIR}: nothing discovered")
endif()
set(count 0)
foreach(list IN LISTS lists)
  file(STRINGS "${list}" lines REGEX "^add_test\\(")
  foreach(line IN LISTS lines)
    math(EXPR count "${count} + 1")
    string(REGEX REPLACE "^add_test\\(\\[=\\[(.*)\\]=\\].*" "\\1" name "${line}")
    if(name MATCHES "GetParam|byte object")
      message(FATAL_ERROR "unreadable test name: ${name}")
    endif()
  endforeach()
endforeach()
message(STATUS "${count} discovered test names, all readable")
