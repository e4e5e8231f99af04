# Sanitizer builds (scripts/sanitizer_tests.sh; each in its own build directory,
# clang only):
#   -DMESHSERVE_SANITIZER=address   AddressSanitizer + UndefinedBehaviorSanitizer;
#                                   with -DMESHSERVE_BUILD_FUZZERS=ON the same
#                                   objects also carry libFuzzer's coverage
#                                   (fuzzer-no-link), so one build serves the
#                                   tests and tests/fuzz.
#   -DMESHSERVE_SANITIZER=thread    ThreadSanitizer.
# Every report is fatal (-fno-sanitize-recover=all; the scripts set
# halt_on_error=1), so a report fails the test that made it. The flags apply to
# every target of the tree, generated protobuf code included; the system
# libraries (gRPC, protobuf, abseil, OpenBLAS) stay uninstrumented.
set(MESHSERVE_SANITIZER "" CACHE STRING "Sanitizer build: '', 'address' (ASan+UBSan) or 'thread' (TSan)")
set_property(CACHE MESHSERVE_SANITIZER PROPERTY STRINGS "" address thread)

if(MESHSERVE_SANITIZER)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "MESHSERVE_SANITIZER needs clang: configure with CMAKE_CXX_COMPILER=clang++")
  endif()
  if(MESHSERVE_SANITIZER STREQUAL "address")
    set(ms_sanitizer_flags -fsanitize=address,undefined)
  elseif(MESHSERVE_SANITIZER STREQUAL "thread")
    set(ms_sanitizer_flags -fsanitize=thread)
  else()
    message(FATAL_ERROR "MESHSERVE_SANITIZER=${MESHSERVE_SANITIZER}: expected address or thread")
  endif()
  list(APPEND ms_sanitizer_flags -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_compile_options(${ms_sanitizer_flags})
  add_link_options(${ms_sanitizer_flags})
  if(MESHSERVE_SANITIZER STREQUAL "thread")
    # The system abseil is not instrumented: annotate its synchronization for
    # TSan (see the file's comment); ms_cc_test links it into every test.
    add_library(ms_tsan_abseil_annotations OBJECT
                ${PROJECT_SOURCE_DIR}/tests/sanitizers/tsan_abseil_annotations.cc)
    target_link_libraries(ms_tsan_abseil_annotations PUBLIC absl::synchronization absl::time
                          ${CMAKE_DL_LIBS})
  endif()
  if(MESHSERVE_BUILD_FUZZERS)
    if(NOT MESHSERVE_SANITIZER STREQUAL "address")
      message(FATAL_ERROR "MESHSERVE_BUILD_FUZZERS goes with MESHSERVE_SANITIZER=address (or none)")
    endif()
    # Coverage for libFuzzer in every object; only ms_cc_fuzz links libFuzzer.
    add_compile_options(-fsanitize=fuzzer-no-link)
  endif()
endif()
