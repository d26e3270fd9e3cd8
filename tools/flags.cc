// Validators for the CLI's numeric and dtype flags (see flags.h).
#include "tools/flags.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "tools/cli.h"

namespace attn::cli {
namespace {

std::string Got(const std::string& text) { return "got '" + text + "', "; }

// "010", "-07": CLI11 converts integers with base 0, which reads them as
// octal ("09" fails), while the checks here read decimal.
bool LeadingZero(const std::string& text) {
  const size_t first = !text.empty() && (text[0] == '+' || text[0] == '-');
  return text.size() > first + 1 && text[first] == '0';
}

// A number that a double holds (no overflow to inf, no underflow towards
// 0) and `in_range` accepts, else "got ..., `want`".
CLI::Validator Number(bool (*in_range)(double), const std::string& want,
                      const std::string& name) {
  return CLI::Validator(
      [in_range, want](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double value = std::strtod(text.c_str(), &end);
        const bool parsed = !text.empty() && *end == '\0' &&
                            !std::isspace(static_cast<unsigned char>(text[0]));
        // ERANGE: past a double's range (inf), or so small it became 0; a
        // subnormal sets it too, and is a number all the same.
        if (errno == ERANGE && (value == 0 || !std::isfinite(value))) {
          return Got(text) + "beyond a double's range, " + want;
        }
        if (!parsed || !std::isfinite(value) || !in_range(value)) {
          return Got(text) + want;
        }
        return "";
      },
      name);
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
        if (LeadingZero(text)) return Got(text) + want + ", no leading zeros";
        return "";
      },
      hi == std::numeric_limits<int64_t>::max()
          ? ">= " + std::to_string(lo)
          : std::to_string(lo) + ".." + std::to_string(hi));
}

CLI::Validator PositiveNumber() {
  return Number([](double v) { return v > 0; }, "want a number above 0",
                "NUMBER > 0");
}

CLI::Validator NonNegativeNumber() {
  return Number([](double v) { return v >= 0; }, "want a number of 0 or more",
                "NUMBER >= 0");
}

CLI::Validator Probability() {
  return Number([](double v) { return v > 0 && v <= 1; },
                "want a number above 0 and at most 1", "0 < NUMBER <= 1");
}

CLI::Validator Unsigned64() {
  const std::string want = "want an integer from 0 to " +
                           std::to_string(std::numeric_limits<uint64_t>::max());
  return CLI::Validator(
      [want](std::string& text) -> std::string {
        const bool digits =
            !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
              return std::isdigit(static_cast<unsigned char>(c));
            });
        errno = 0;
        if (digits) std::strtoull(text.c_str(), nullptr, 10);
        if (!digits || errno != 0) return Got(text) + want;
        if (LeadingZero(text)) return Got(text) + want + ", no leading zeros";
        return "";
      },
      "UINT64");
}

CLI::Validator FilePath() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        return text.empty() ? "got '', want a file path" : "";
      },
      "FILE");
}

void AddWeightsOrModel(CLI::App* command, std::string& weights,
                       const std::string& weights_help) {
  CLI::Option* file = command->add_option("--weights", weights, weights_help)
                          ->check(FilePath());
  CLI::Option* folder =
      command
          ->add_option("--model", weights,
                       "a model's folder as Hugging Face publishes it: "
                       "config.json beside model.safetensors, or shards "
                       "and model.safetensors.index.json")
          ->check(FilePath());
  file->excludes(folder);
}

int WeightsGiven(const std::string& weights) {
  return weights.empty() ? Usage("--weights FILE or --model DIR: want one") : 0;
}

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

CLI::Validator DTypeFlag(std::vector<DType> allowed) {
  std::string names, wanted;
  for (size_t i = 0; i < allowed.size(); ++i) {
    const std::string name = DTypeName(allowed[i]);
    const bool last = i + 1 == allowed.size();
    names += (i == 0 ? "" : "|") + name;
    wanted += (i == 0 ? "" : last ? " or " : ", ") + name;
  }
  return CLI::Validator(
      [allowed, wanted](std::string& text) -> std::string {
        for (const DType dtype : allowed) {
          if (text == DTypeName(dtype)) {
            text = std::to_string(static_cast<int>(dtype));
            return "";
          }
        }
        return Got(text) + "want " + wanted;
      },
      names);
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
