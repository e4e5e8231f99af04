# Target helpers modelled on absl_cc_library / absl_cc_test.
#
#   ms_cc_library(NAME foo HDRS a.h SRCS a.cc DEPS absl::status)
#   ms_cc_test(NAME foo_test SRCS a_test.cc DEPS foo)
#   ms_cc_binary(NAME meshserve SRCS main.cc DEPS ...)
#
# Libraries are static; tests link GTest::gmock_main and are registered with CTest;
# binaries land in ${CMAKE_BINARY_DIR}/bin.
include(CMakeParseArguments)

function(ms_cc_library)
  cmake_parse_arguments(MS "" "NAME" "HDRS;SRCS;DEPS" ${ARGN})
  if(MS_SRCS)
    add_library(${MS_NAME} STATIC ${MS_SRCS} ${MS_HDRS})
    target_link_libraries(${MS_NAME} PUBLIC ${MS_DEPS})
    target_include_directories(${MS_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  else()
    add_library(${MS_NAME} INTERFACE)
    target_link_libraries(${MS_NAME} INTERFACE ${MS_DEPS})
    target_include_directories(${MS_NAME} INTERFACE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  endif()
endfunction()

function(ms_cc_test)
  cmake_parse_arguments(MS "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT MESHSERVE_BUILD_TESTS)
    return()
  endif()
  add_executable(${MS_NAME} ${MS_SRCS})
  target_link_libraries(${MS_NAME} PRIVATE ${MS_DEPS} ms_testing GTest::gmock_main)
  set_target_properties(${MS_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${MS_NAME} COMMAND ${MS_NAME})
  if(MS_LABELS)
    set_tests_properties(${MS_NAME} PROPERTIES LABELS "${MS_LABELS}")
  endif()
endfunction()

function(ms_cc_binary)
  cmake_parse_arguments(MS "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${MS_NAME} ${MS_SRCS})
  target_link_libraries(${MS_NAME} PRIVATE ${MS_DEPS})
  set_target_properties(${MS_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endfunction()

# ms_glob_package(NAME lib DEPS ... [TEST_DEPS ...])
# One library from every *.cc in the current folder except *_test.cc and
# *_main.cc, and one test target per *_test.cc (named after the file) linking
# the library. New files need no CMake edit, so owners of different files in
# one folder never touch the same build file.
function(ms_glob_package)
  cmake_parse_arguments(MS "" "NAME" "DEPS;TEST_DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  list(FILTER srcs EXCLUDE REGEX "(_test|_main|_fuzz)\\.cc$")
  file(GLOB hdrs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.h)
  ms_cc_library(NAME ${MS_NAME} HDRS ${hdrs} SRCS ${srcs} DEPS ${MS_DEPS})
  file(GLOB tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cc)
  foreach(test ${tests})
    get_filename_component(test_name ${test} NAME_WE)
    ms_cc_test(NAME ${test_name} SRCS ${test} DEPS ${MS_NAME} ${MS_TEST_DEPS})
  endforeach()
endfunction()
