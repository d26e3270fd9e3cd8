// Validators for the CLI's numeric and dtype flags (see flags.h).
#include "tools/flags.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

namespace attn::cli {
namespace {

std::string Got(const std::string& text) { return "got '" + text + "', "; }

// A finite number above 0, or from 0 when `zero_allowed`.
CLI::Validator Number(bool zero_allowed) {
  const std::string want =
      zero_allowed ? "want a number of 0 or more" : "want a number above 0";
  return CLI::Validator(
      [zero_allowed, want](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        const bool parsed = !text.empty() && *end == '\0' &&
                            !std::isspace(static_cast<unsigned char>(text[0]));
        const bool in_range = zero_allowed ? value >= 0 : value > 0;
        if (!parsed || !std::isfinite(value) || !in_range) {
          return Got(text) + want;
        }
        return "";
      },
      zero_allowed ? "NUMBER >= 0" : "NUMBER > 0");
}

}  // namespace

CLI::Validator IntegerIn(int64_t lo, int64_t hi) {
  const std::string want =
      hi == std::numeric_limits<int64_t>::max()
          ? "want an integer of " + std::to_string(lo) + " or more"
          : "want an integer from " + std::to_string(lo) + " to " +
                std::to_string(hi);
  return CLI::Validator(
      [lo, hi, want](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long value = std::strtoll(text.c_str(), &end, 10);
        const bool parsed = !text.empty() && *end == '\0' && errno == 0 &&
                            !std::isspace(static_cast<unsigned char>(text[0]));
        if (!parsed || value < lo || value > hi) return Got(text) + want;
        return "";
      },
      hi == std::numeric_limits<int64_t>::max()
          ? ">= " + std::to_string(lo)
          : std::to_string(lo) + ".." + std::to_string(hi));
}

CLI::Validator PositiveNumber() { return Number(false); }

CLI::Validator NonNegativeNumber() { return Number(true); }

CLI::Validator ByteSize() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        // Digits, then an optional unit (K, M, G, KiB, ...), which
        // CLI::AsSizeValue checks with the overflow.
        const auto unit = std::find_if(text.begin(), text.end(), [](char c) {
          return !std::isdigit(static_cast<unsigned char>(c));
        });
        const bool positive =
            std::any_of(text.begin(), unit, [](char c) { return c != '0'; });
        const bool letters = std::all_of(unit, text.end(), [](char c) {
          return std::isalpha(static_cast<unsigned char>(c));
        });
        if (!positive || !letters) {
          return Got(text) +
                 "want a size of at least 1 byte, such as 4096, 512M or 4G";
        }
        return "";
      },
      "SIZE");
}

CLI::Validator DTypeFlag() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        for (const DType dtype : {DType::kF32, DType::kBF16}) {
          if (text == DTypeName(dtype)) {
            text = std::to_string(static_cast<int>(dtype));
            return "";
          }
        }
        return Got(text) + "want f32 or bf16";
      },
      "f32|bf16");
}

const char* DTypeName(DType dtype) {
  return dtype == DType::kBF16 ? "bf16" : "f32";
}

void AttentionFlags::AddTo(CLI::App* command) {
  command
      ->add_option("--kv-heads", kv_heads,
                   "K/V heads of grouped-query attention, dividing the heads "
                   "(default: metadata num_kv_heads, else W_key's rows)")
      ->check(IntegerIn(1));
  command
      ->add_option("--sliding-window", sliding_window,
                   "query i sees keys (i - W, i] (default: metadata "
                   "sliding_window, else every earlier key)")
      ->check(IntegerIn(1));
  CLI::Option* theta =
      command
          ->add_option("--rope-theta", rope.theta,
                       "rotary position embeddings with this base, with "
                       "the scaling flags below as given (default: metadata "
                       "rope_theta and rope_*, else none)")
          ->check(PositiveNumber());
  // Llama 3.1's scaling goes with a theta: the rope fields come as a group.
  const std::pair<const char*, double*> scaling[] = {
      {"--rope-factor", &rope.factor},
      {"--rope-low-freq-factor", &rope.low_freq_factor},
      {"--rope-high-freq-factor", &rope.high_freq_factor}};
  for (const auto& [flag, field] : scaling) {
    command
        ->add_option(flag, *field,
                     std::string("Llama 3.1 frequency scaling's ") +
                         (flag + 7) + " (with --rope-theta)")
        ->check(PositiveNumber())
        ->needs(theta);
  }
  command
      ->add_option("--rope-original-context-length",
                   rope.original_context_length,
                   "Llama 3.1 frequency scaling's original context length "
                   "(with --rope-theta)")
      ->check(IntegerIn(1))
      ->needs(theta);
}

void AttentionFlags::ApplyTo(ModelOptions& options) const {
  options.num_kv_heads = kv_heads;
  options.sliding_window = sliding_window;
  options.rope = rope;
}

}  // namespace attn::cli
