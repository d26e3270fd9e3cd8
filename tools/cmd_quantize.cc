// attn quantize: a model's folder rewritten with q8_0 or q4_0 linears
// (attn::QuantizeModel), which then loads without quantizing.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "attn/lm.hpp"
#include "tools/atomic_output.h"
#include "tools/cli.h"
#include "tools/flags.h"
#include "tools/lm_cli.h"

namespace attn::cli {
namespace {

struct QuantizeArgs {
  std::string weights, output;
  DType type = DType::kQ8_0;  // set by --type, which is required
  LmModelFlags model;         // what reading the model takes
};

int Quantize(const QuantizeArgs& args) {
  if (const int rc = WeightsGiven(args.weights)) return rc;
  InstallInterruptHandlers();
  const auto start = std::chrono::steady_clock::now();
  const Status s = RunHoldingSignals([&] {
    return QuantizeModel(args.weights, args.output, args.type,
                         args.model.Options(), InterruptPending);
  });
  if (!s.ok()) return Fail(s.message());
  const std::chrono::duration<double> took =
      std::chrono::steady_clock::now() - start;
  std::fprintf(stderr, "attn: wrote %s (%s) in %.1f s\n", args.output.c_str(),
               DTypeName(args.type), took.count());
  return 0;
}

}  // namespace

Command AddQuantizeCommand(CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  CLI::App* command = app.add_subcommand(
      "quantize",
      "Write a model's folder with its linears in q8_0 or q4_0 blocks, which "
      "loads without quantizing");
  AddWeightsOrModel(command, args->weights,
                    "the model to quantize (F32, F16 or BF16)");
  command
      ->add_option("--type", args->type,
                   "q8_0 (8.5 bits a weight) or q4_0 (4.5 bits)")
      ->required()
      ->transform(DTypeFlag({DType::kQ8_0, DType::kQ4_0}));
  command
      ->add_option("--output", args->output,
                   "the new folder: model.safetensors and the configuration "
                   "and tokenizer files copied (must not exist)")
      ->required()
      ->check(FilePath());
  args->model.AddLoadFlags(command);
  return {command, [args] { return Quantize(*args); }};
}

}  // namespace attn::cli
