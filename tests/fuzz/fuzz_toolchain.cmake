# Included by the root CMakeLists.txt right after find_package(OpenMP) when
# ATTN_BUILD_FUZZERS is ON: a clang build with ASan + UBSan everywhere and
# libFuzzer coverage in every object (see tests/fuzz/README.md).
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "ATTN_BUILD_FUZZERS needs clang (libFuzzer): configure "
    "with -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14")
endif()

# Debian's oneDNN runs on GCC's libgomp. Two OpenMP runtimes in one process
# (LLVM's libomp for our loops, libgomp for oneDNN's) would fight over
# threads, so everything links libgomp. Clang emits no libgomp calls: with
# -fopenmp=libgomp our own `omp` pragmas run serially here, which is what a
# fuzzer wants anyway; omp.h still comes from clang (libomp-14-dev).
find_library(ATTN_LIBGOMP NAMES libgomp.so.1 gomp REQUIRED)
foreach(lang C CXX)
  set_property(TARGET OpenMP::OpenMP_${lang} PROPERTY
    INTERFACE_COMPILE_OPTIONS "$<$<COMPILE_LANGUAGE:${lang}>:-fopenmp=libgomp>")
  set_property(TARGET OpenMP::OpenMP_${lang} PROPERTY
    INTERFACE_LINK_LIBRARIES "${ATTN_LIBGOMP}")
endforeach()

if(NOT ATTN_SANITIZE)
  set(ATTN_SANITIZE "address;undefined" CACHE STRING
      "Sanitizers to build with, e.g. address;undefined" FORCE)
endif()
add_compile_options(-fsanitize=fuzzer-no-link)
# Only the baseline Highway target: the fuzzers reach parsers and validation,
# and the ASan test stage runs every target's kernels. A quarter of the
# kernels' compile time, which is most of this build's.
add_compile_definitions(HWY_COMPILE_ONLY_STATIC)
