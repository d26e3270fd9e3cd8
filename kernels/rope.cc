// The RoPE table (built once, in float32 the way PyTorch builds it) and the
// dynamic dispatch of the rotation: one HWY_DYNAMIC_DISPATCH per call, or
// per block of rows in the threaded form.
#include "kernels/rope.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <string>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rope.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/rope-inl.h"
#include "kernels/threads.h"

HWY_BEFORE_NAMESPACE();
namespace attn::kernels::HWY_NAMESPACE {

void RotateRows(const RopeTable& table, const RopeRows& rows,
                const int64_t* positions, int64_t first_position) {
  RopeRowsT(table, rows, positions, first_position);
}

}  // namespace attn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace attn::kernels {

HWY_EXPORT(RotateRows);

namespace {

bool Scaled(const RopeConfig& config) {
  return config.factor > 0.0f && config.factor != 1.0f;
}

}  // namespace

Status ValidateRopeConfig(const RopeConfig& config) {
  if (!(config.theta > 0.0f) || !std::isfinite(config.theta)) {
    return InvalidArgument("rope theta is " + std::to_string(config.theta) +
                           "; wanted a finite value > 0");
  }
  if (std::isnan(config.factor)) {
    return InvalidArgument(
        "rope scaling factor is NaN; wanted <= 0 or 1 "
        "for none, or a finite factor");
  }
  if (!Scaled(config)) return Status();
  if (!std::isfinite(config.factor) || !(config.low_freq_factor > 0.0f) ||
      !(config.high_freq_factor > config.low_freq_factor) ||
      !std::isfinite(config.high_freq_factor) ||
      config.original_context_length <= 0) {
    return InvalidArgument(
        "rope scaling: factor " + std::to_string(config.factor) +
        ", low_freq_factor " + std::to_string(config.low_freq_factor) +
        ", high_freq_factor " + std::to_string(config.high_freq_factor) +
        ", original_context_length " +
        std::to_string(config.original_context_length) +
        "; wanted finite factors with 0 < low < high and a context > 0");
  }
  return Status();
}

namespace {

// Llama 3.1's scaling of one frequency, in float32 and in the order of
// Hugging Face's _compute_llama3_parameters: long wavelengths divided by
// factor, short ones kept, a linear blend between.
float ScaleLlama3(float inv_freq, const RopeConfig& config) {
  const double original = static_cast<double>(config.original_context_length);
  const auto low_freq_wavelen =
      static_cast<float>(original / config.low_freq_factor);
  const auto high_freq_wavelen =
      static_cast<float>(original / config.high_freq_factor);
  // PyTorch computes scalar / tensor as reciprocal(tensor) * scalar: the
  // same here, for the same bits.
  const float wavelen = (1.0f / inv_freq) * static_cast<float>(2.0 * M_PI);
  if (wavelen > low_freq_wavelen) return inv_freq / config.factor;
  if (wavelen < high_freq_wavelen) return inv_freq;
  const float smooth = ((1.0f / wavelen) * static_cast<float>(original) -
                        config.low_freq_factor) /
                       (config.high_freq_factor - config.low_freq_factor);
  return (1.0f - smooth) * inv_freq / config.factor + smooth * inv_freq;
}

}  // namespace

std::vector<float> RopeInverseFrequencies(const RopeConfig& config,
                                          int64_t head_dim) {
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    // torch.arange(0, head_dim, 2).float() / head_dim, then a float32 pow
    // (here the double pow rounded once to float).
    const float exponent =
        static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const auto power = static_cast<float>(std::pow(
        static_cast<double>(config.theta), static_cast<double>(exponent)));
    inv_freq[i] = 1.0f / power;
    if (Scaled(config)) inv_freq[i] = ScaleLlama3(inv_freq[i], config);
  }
  return inv_freq;
}

size_t RopeTable::BytesFor(int64_t head_dim, int64_t max_positions) {
  if (head_dim <= 0 || head_dim % 2 != 0 || max_positions <= 0) return 0;
  // cos and sin, head_dim / 2 floats each per position: head_dim floats.
  const auto limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max() /
                                           sizeof(float));
  if (static_cast<uint64_t>(head_dim) >
      limit / static_cast<uint64_t>(max_positions)) {
    return 0;
  }
  return static_cast<size_t>(head_dim) * static_cast<size_t>(max_positions) *
         sizeof(float);
}

Result<RopeTable> RopeTable::Create(const RopeConfig& config, int64_t head_dim,
                                    int64_t max_positions) {
  if (head_dim <= 0 || head_dim % 2 != 0) {
    return InvalidArgument("rope head_dim is " + std::to_string(head_dim) +
                           "; wanted an even number > 0");
  }
  if (BytesFor(head_dim, max_positions) == 0) {
    return InvalidArgument("rope max_positions is " +
                           std::to_string(max_positions) +
                           "; wanted > 0 and a table that fits in memory");
  }
  ATTN_RETURN_IF_ERROR(ValidateRopeConfig(config));
  const std::vector<float> inv_freq = RopeInverseFrequencies(config, head_dim);
  const size_t half = inv_freq.size();
  RopeTable table;
  table.head_dim_ = head_dim;
  table.max_positions_ = max_positions;
  try {
    table.cos_.resize(half * static_cast<size_t>(max_positions));
    table.sin_.resize(table.cos_.size());
  } catch (const std::bad_alloc&) {
    return OutOfMemory("rope table of " +
                       std::to_string(BytesFor(head_dim, max_positions)) +
                       " bytes");
  }
  for (int64_t p = 0; p < max_positions; ++p) {
    for (size_t i = 0; i < half; ++i) {
      // The float32 product torch.outer(positions, inv_freq) makes.
      const float angle = static_cast<float>(p) * inv_freq[i];
      table.cos_[p * half + i] = std::cos(angle);
      table.sin_[p * half + i] = std::sin(angle);
    }
  }
  return table;
}

void ApplyRope(const RopeTable& table, const RopeRows& rows,
               const int64_t* positions) {
  HWY_DYNAMIC_DISPATCH(RotateRows)(table, rows, positions, 0);
}

void ApplyRope(const RopeTable& table, const RopeRows& rows,
               int64_t first_position) {
  HWY_DYNAMIC_DISPATCH(RotateRows)(table, rows, nullptr, first_position);
}

void ApplyRope(const RopeTable& table, const RopeRows& rows,
               const int64_t* positions, int num_threads) {
  const size_t row_floats =
      std::max<size_t>(1, rows.num_heads * table.head_dim());
  const auto rotate = HWY_DYNAMIC_DISPATCH(RotateRows);
  ParallelForChunks(rows.num_rows, row_floats, 1, num_threads,
                    [&](size_t r, size_t n) {
                      RopeRows part = rows;
                      part.data = rows.data + r * rows.row_stride;
                      part.num_rows = n;
                      rotate(table, part, positions + r, 0);
                    });
}

}  // namespace attn::kernels
#endif  // HWY_ONCE
