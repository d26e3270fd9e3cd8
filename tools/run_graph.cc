// attn run --graph: one forward pass of a JSON graph (attn/graph.hpp) from a
// safetensors input to a safetensors output.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attn/graph.hpp"
#include "attn/safetensors.hpp"
#include "tools/atomic_output.h"
#include "tools/graph_cli.h"

namespace attn::cli {

int RunGraph(const GraphRunArgs& args) {
  if (args.incremental) {
    return Fail(
        "--incremental is not supported with --graph, want a whole "
        "sequence per run");
  }
  InstallInterruptHandlers();
  GraphOptions options;
  options.num_heads = args.heads;
  options.context_length = args.context_length;
  options.layers = args.layers;
  options.num_threads = args.threads;
  options.dtype = args.dtype == "bf16" ? DType::kBF16 : DType::kF32;
  auto graph = Graph::Load(args.graph, args.weights, options);
  if (!graph.ok()) return Fail(graph.status().message());
  const int64_t width = (*graph)->input_width();

  auto file = SafetensorsFile::Open(args.input);
  if (!file.ok()) return Fail(file.status().message());
  const TensorInfo* x = file->Find(args.input_name);
  if (!x) {
    return Fail("input tensor '" + args.input_name + "' is missing from '" +
                args.input + "' (name another with --input-name)");
  }
  if (x->dtype != "F32") {
    return Fail("input tensor '" + args.input_name + "' has dtype " + x->dtype +
                ", want F32");
  }
  if (x->shape.size() != 3 || x->shape[2] != width || x->shape[0] <= 0 ||
      x->shape[1] <= 0) {
    return Fail("input tensor '" + args.input_name + "' has shape " +
                ShapeString(x->shape) + ", want [batch, seq_len, " +
                std::to_string(width) + "]");
  }
  const int64_t batch = x->shape[0], seq_len = x->shape[1];
  auto values = file->ReadF32(args.input_name);
  if (!values.ok()) return Fail(values.status().message());
  if (!args.allow_nonfinite) {
    const auto bad = std::find_if(values->begin(), values->end(),
                                  [](float v) { return !std::isfinite(v); });
    if (bad != values->end()) {
      return Fail("input tensor '" + args.input_name + "' holds " +
                  std::to_string(*bad) + " at element " +
                  std::to_string(bad - values->begin()) +
                  ", want finite values (--allow-nonfinite passes them "
                  "through as PyTorch would)");
    }
  }
  const int64_t out_width = (*graph)->output_width();
  std::vector<float> y(static_cast<size_t>(batch * seq_len * out_width));
  const Status status = (*graph)->Run(values->data(), batch, seq_len, y.data());
  if (!status.ok()) return Fail(status.message());
  const Status written = WriteOutputAtomically(
      args.output, {{"output", {batch, seq_len, out_width}, y.data()}});
  if (!written.ok()) return Fail(written.message());
  return 0;
}

}  // namespace attn::cli
