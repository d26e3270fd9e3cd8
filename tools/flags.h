// Checks for the CLI's numeric and dtype flags (used by every cmd_*.cc). A bad
// value is refused before conversion with one line that says what the flag got
// and what it wants, e.g. "--threads: got 0, want an integer from 1 to 4096",
// instead of CLI11's range of doubles printed in full.
#ifndef ATTN_TOOLS_FLAGS_H_
#define ATTN_TOOLS_FLAGS_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "CLI/CLI.hpp"
#include "attn/attn.hpp"

namespace attn::cli {

// An integer in [lo, hi].
CLI::Validator IntegerIn(int64_t lo,
                         int64_t hi = std::numeric_limits<int64_t>::max());

// A finite number above 0 (seconds), or at least 0 (a percentage), or
// above 0 and at most 1 (a share of the probability); a double must hold it
// (1e400 and 1e-400 are refused, not taken as inf and 0).
CLI::Validator PositiveNumber();
CLI::Validator NonNegativeNumber();
CLI::Validator Probability();

// An integer from 0 to 2^64 - 1 (a seed), decimal digits only: CLI11 alone
// wraps "-1" and saturates past the top.
CLI::Validator Unsigned64();

// A file path, not empty: an empty one would mean "none" and be ignored.
CLI::Validator FilePath();

// A byte size such as 4096, 512M or 4G, at least 1 byte; goes before
// CLI::AsSizeValue, which takes a leading '-' as a number and wraps it.
CLI::Validator ByteSize();

// A flag's dtypes, by default --dtype's f32, bf16, q8_0 or q4_0 (language
// models only: the engine refuses them for others): each name of `allowed`
// turned into the DType it names for CLI11 to store (a DType, or a list of
// them); anything else, the enum's integers included, is refused with one
// line.
CLI::Validator DTypeFlag(std::vector<DType> allowed = {
                             DType::kF32, DType::kBF16, DType::kQ8_0,
                             DType::kQ4_0});

// --weights FILE and --model DIR, either into `weights` (one of them; the
// command checks one was given with WeightsGiven): a model's folder as
// Hugging Face publishes it loads as its weights file does.
void AddWeightsOrModel(CLI::App* command, std::string& weights,
                       const std::string& weights_help);
// A usage error (2) when neither --weights nor --model was given; 0 else.
int WeightsGiven(const std::string& weights);

// The attention variant's flags (--kv-heads, --rope-theta and its scaling,
// --sliding-window) of `attn run` and `attn bench`: each overrides the
// file's metadata of the same name.
struct AttentionFlags {
  int64_t kv_heads = 0, sliding_window = 0;
  RopeConfig rope;
  void AddTo(CLI::App* command);
  void ApplyTo(ModelOptions& options) const;
};

}  // namespace attn::cli

#endif  // ATTN_TOOLS_FLAGS_H_
