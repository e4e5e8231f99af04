# Target helpers modelled on absl_cc_library / absl_cc_test: the one build idiom
# of this tree. Every target lists its sources and its real dependencies; there
# are no globs and no existence guards.
#
#   ms_cc_library(NAME foo HDRS a.h SRCS a.cc DEPS absl::status [TESTONLY] [NO_UNITY])
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

# Build cost (CI runs on two slow cores; see scripts/test.sh's budget):
# MESHSERVE_UNITY_BUILD compiles each library's (and binary's) sources in batches of 8 per
# translation unit, so the heavy headers (gRPC, protobuf, abseil) are parsed
# once per batch; NO_UNITY opts a library out (generated code). Test sources
# (MS_TEST_COPTS) compile at -O1 without debug info in the optimised builds:
# they check results, the code they test is compiled as it ships.
# MESHSERVE_TEST_PCH gives every test one precompiled header,
# tests/testing/test_pch.h, built once by ms_test_pch (GCC and clang, the
# sanitizer builds too: flags are the same for every test of a build).
option(MESHSERVE_UNITY_BUILD "Compile each library's sources in unity batches" ON)
set(MS_TEST_COPTS "")
if(NOT MESHSERVE_SANITIZER AND CMAKE_BUILD_TYPE MATCHES "^(RelWithDebInfo|Release)$")
  set(MS_TEST_COPTS -O1 -g0)
endif()
# -pthread on every test: it defines _REENTRANT, which the system headers read,
# so it must be the same in each test as in the precompiled header.
list(APPEND MS_TEST_COPTS -pthread)
option(MESHSERVE_TEST_PCH "One precompiled header for every test" ON)

function(ms_test_pch name)
  if(NOT MESHSERVE_TEST_PCH)
    return()
  endif()
  if(NOT TARGET ms_test_pch)
    add_executable(ms_test_pch ${PROJECT_SOURCE_DIR}/tests/testing/test_pch_owner.cc)
    target_link_libraries(ms_test_pch PRIVATE absl::status absl::statusor absl::str_format
                          absl::strings absl::synchronization absl::time GTest::gmock_main)
    target_compile_options(ms_test_pch PRIVATE ${MS_WARNING_FLAGS} ${MS_TEST_COPTS})
    target_precompile_headers(ms_test_pch PRIVATE ${PROJECT_SOURCE_DIR}/tests/testing/test_pch.h)
    set_target_properties(ms_test_pch PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                          ${CMAKE_BINARY_DIR}/tests/pch)
  endif()
  target_precompile_headers(${name} REUSE_FROM ms_test_pch)
endfunction()

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
  cmake_parse_arguments(MS "TESTONLY;NO_UNITY" "NAME" "HDRS;SRCS;DEPS" ${ARGN})
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
    if(MS_TESTONLY)
      target_compile_options(${MS_NAME} PRIVATE ${MS_TEST_COPTS})
    endif()
    if(MESHSERVE_UNITY_BUILD AND NOT MS_NO_UNITY)
      set_target_properties(${MS_NAME} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
    endif()
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
  target_compile_options(${MS_NAME} PRIVATE ${MS_WARNING_FLAGS} ${MS_TEST_COPTS})
  ms_test_pch(${MS_NAME})
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
  if(MESHSERVE_UNITY_BUILD)
    set_target_properties(${MS_NAME} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
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
