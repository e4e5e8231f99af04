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
