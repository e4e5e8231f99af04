# Target helpers modelled on absl_cc_library / absl_cc_test: the one build idiom
# of this tree. Every target lists its sources and its real dependencies; there
# are no globs and no existence guards.
#
#   ms_cc_library(NAME foo HDRS a.h SRCS a.cc DEPS absl::status [TESTONLY])
#   ms_cc_test(NAME foo_test SRCS a_test.cc DEPS foo [DEFINES K=V] [LABELS l]
#              [NEEDS_BINARIES meshserve-worker])
#   ms_cc_binary(NAME meshserve SRCS main.cc DEPS ...)
#   ms_cc_fuzz(NAME spec_fuzz SRCS spec_fuzz.cc DEPS ...)
#
# Libraries are static (header-only ones INTERFACE); tests link
# GTest::gmock_main and are registered with CTest; binaries land in
# ${CMAKE_BINARY_DIR}/bin, tests in ${CMAKE_BINARY_DIR}/tests.
#
# TESTONLY (abseil's and Bazel's testonly): the library holds fakes, reference
# executors, test models or harnesses. It is built only with tests, and a
# library without TESTONLY that depends on one is a configure error, so test
# code never reaches a production library.
include(CMakeParseArguments)

# Warnings for our own targets (not for generated protobuf code).
set(MS_WARNING_FLAGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)
# MESHSERVE_WERROR makes those warnings errors. scripts/setup.sh (the README's
# commands, CI) turns it on: GCC 12 builds the tree without a warning. It stays
# off by default for other compilers and for the clang fuzz build.
option(MESHSERVE_WERROR "Treat warnings in meshserve's own targets as errors" OFF)
if(MESHSERVE_WERROR)
  list(APPEND MS_WARNING_FLAGS -Werror)
endif()

function(ms_check_testonly_deps name)
  foreach(dep ${ARGN})
    if(TARGET ${dep})
      get_target_property(is_testonly ${dep} MS_TESTONLY)
      if(is_testonly)
        message(FATAL_ERROR "${name} is not TESTONLY but depends on the TESTONLY library ${dep}")
      endif()
    endif()
  endforeach()
endfunction()

function(ms_cc_library)
  cmake_parse_arguments(MS "TESTONLY" "NAME" "HDRS;SRCS;DEPS" ${ARGN})
  if(MS_TESTONLY AND NOT MESHSERVE_BUILD_TESTS)
    return()
  endif()
  if(NOT MS_TESTONLY)
    ms_check_testonly_deps(${MS_NAME} ${MS_DEPS})
  endif()
  if(MS_SRCS)
    add_library(${MS_NAME} STATIC ${MS_SRCS} ${MS_HDRS})
    target_link_libraries(${MS_NAME} PUBLIC ${MS_DEPS})
    target_include_directories(${MS_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
    target_compile_options(${MS_NAME} PRIVATE ${MS_WARNING_FLAGS})
  else()
    add_library(${MS_NAME} INTERFACE)
    target_link_libraries(${MS_NAME} INTERFACE ${MS_DEPS})
    target_include_directories(${MS_NAME} INTERFACE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  endif()
  set_target_properties(${MS_NAME} PROPERTIES MS_TESTONLY "${MS_TESTONLY}")
endfunction()

function(ms_cc_test)
  cmake_parse_arguments(MS "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS;DEFINES;NEEDS_BINARIES" ${ARGN})
  if(NOT MESHSERVE_BUILD_TESTS)
    return()
  endif()
  add_executable(${MS_NAME} ${MS_SRCS})
  target_link_libraries(${MS_NAME} PRIVATE ${MS_DEPS} ms_testing GTest::gmock_main)
  if(TARGET ms_tsan_abseil_annotations)  # MESHSERVE_SANITIZER=thread
    target_link_libraries(${MS_NAME} PRIVATE ms_tsan_abseil_annotations)
  endif()
  target_compile_options(${MS_NAME} PRIVATE ${MS_WARNING_FLAGS})
  if(MS_DEFINES)
    target_compile_definitions(${MS_NAME} PRIVATE ${MS_DEFINES})
  endif()
  foreach(bin ${MS_NEEDS_BINARIES})
    add_dependencies(${MS_NAME} ${bin})
  endforeach()
  set_target_properties(${MS_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${MS_NAME} COMMAND ${MS_NAME})
  set_property(GLOBAL APPEND PROPERTY MS_TEST_TARGETS ${MS_NAME})
  if(MS_LABELS)
    set_tests_properties(${MS_NAME} PROPERTIES LABELS "${MS_LABELS}")
  endif()
  if(MS_TIMEOUT)
    set_tests_properties(${MS_NAME} PROPERTIES TIMEOUT ${MS_TIMEOUT})
  endif()
endfunction()

function(ms_cc_binary)
  cmake_parse_arguments(MS "" "NAME" "SRCS;DEPS" ${ARGN})
  ms_check_testonly_deps(${MS_NAME} ${MS_DEPS})
  add_executable(${MS_NAME} ${MS_SRCS})
  target_link_libraries(${MS_NAME} PRIVATE ${MS_DEPS})
  target_compile_options(${MS_NAME} PRIVATE ${MS_WARNING_FLAGS})
  set_target_properties(${MS_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
endfunction()

# A libFuzzer target (clang only; see tests/fuzz/run_fuzzers.sh), in build/fuzz.
function(ms_cc_fuzz)
  cmake_parse_arguments(MS "" "NAME" "SRCS;DEPS" ${ARGN})
  set(flags -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
  add_executable(${MS_NAME} ${MS_SRCS})
  target_link_libraries(${MS_NAME} PRIVATE ${MS_DEPS})
  target_compile_options(${MS_NAME} PRIVATE ${flags} ${MS_WARNING_FLAGS})
  target_link_options(${MS_NAME} PRIVATE ${flags})
  set_target_properties(${MS_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
endfunction()
