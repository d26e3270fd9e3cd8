// libFuzzer target: the graph runner's JSON parser and validator
// (GraphModel::FromJson) on arbitrary text, against a fixed weights file of a
// tiny GPT block (d 4, hidden 8); a graph that validates is compiled and run on
// a [1, 3, width] input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "attn/graph.hpp"
#include "tests/fuzz/fuzz_util.h"
#include "tests/hostile_files.h"

namespace {

// Every tensor F32, all 0.1, laid out back to back.
std::string WeightsFile(
    const std::vector<std::pair<std::string, std::vector<int>>>& tensors) {
  std::string header = "{\"__metadata__\":{\"num_heads\":\"2\"}";
  size_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    size_t count = 1;
    std::string dims;
    for (int d : shape) {
      count *= static_cast<size_t>(d);
      dims += (dims.empty() ? "" : ",") + std::to_string(d);
    }
    header += "," + attn::test::Entry(name, "F32", "[" + dims + "]", offset,
                                      offset + 4 * count);
    offset += 4 * count;
  }
  return attn::test::SafetensorsBytes(header + "}",
                                      attn::test::Floats(offset / 4, 0.1f));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static attn::fuzz::MemFile weights("weights");
  static bool once = [] {
    weights.Set(WeightsFile({{"ln1.scale", {4}},
                             {"ln1.shift", {4}},
                             {"att.W_query.weight", {4, 4}},
                             {"att.W_key.weight", {4, 4}},
                             {"att.W_value.weight", {4, 4}},
                             {"att.out_proj.weight", {4, 4}},
                             {"att.out_proj.bias", {4}},
                             {"ln2.scale", {4}},
                             {"ln2.shift", {4}},
                             {"ff.0.weight", {8, 4}},
                             {"ff.0.bias", {8}},
                             {"ff.2.weight", {4, 8}},
                             {"ff.2.bias", {4}}}));
    return true;
  }();
  (void)once;
  attn::GraphOptions options;
  options.num_threads = 1;
  auto graph = attn::GraphModel::FromJson(
      std::string(reinterpret_cast<const char*>(data), size), weights.path(),
      options);
  if (!graph.ok()) {
    if (graph.status().message().empty()) std::abort();
    return 0;
  }
  const attn::GraphModel& g = **graph;
  if (g.input_width() <= 0 || g.input_width() > (1 << 16) ||
      g.output_width() <= 0 || g.output_width() > (1 << 16)) {
    std::abort();  // widths come from the 4- and 8-wide weights above
  }
  const int64_t T = 3;
  std::vector<float> x(static_cast<size_t>(T * g.input_width()), 0.5f);
  std::vector<float> y(static_cast<size_t>(T * g.output_width()));
  const attn::Status status =
      attn::GraphSession(*graph).Run(x.data(), 1, T, y.data());
  if (!status.ok() && status.message().empty()) std::abort();
  return 0;
}
