// main() for every program in bench/: benchmarks are registered at run time
// (one per grid shape and thread count), and the context records what the
// numbers depend on: the Highway target, oneDNN's ISA and the thread count.
#include <benchmark/benchmark.h>

#include <string>

#include "attn/attn.hpp"
#include "bench/bench_util.h"

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const attn::RuntimeInfo info = attn::GetRuntimeInfo();
  benchmark::AddCustomContext("attn", info.version);
  benchmark::AddCustomContext("highway_target", info.simd_target);
  benchmark::AddCustomContext("onednn",
                              info.onednn_version + " " + info.onednn_isa);
  benchmark::AddCustomContext("default_threads",
                              std::to_string(info.default_threads));
  attn::bench::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
