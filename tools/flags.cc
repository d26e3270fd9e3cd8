// Validators for the CLI's numeric flags (see flags.h).
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

}  // namespace attn::cli
