// StepWeights: a linear's weights as a decode step's few rows read them
// (kernels::RowsLinear's panels), in fp32 or bf16. Steps of up to
// kernels::kRowsLinearMaxRows rows are bound by reading these once.
#ifndef ATTN_ENGINE_OPS_STEP_WEIGHTS_H_
#define ATTN_ENGINE_OPS_STEP_WEIGHTS_H_

#include <cstddef>
#include <cstdint>

#include "attn/status.hpp"
#include "engine/runtime/buffer.h"
#include "engine/runtime/limits.h"
#include "hwy/base.h"
#include "kernels/rows_linear.h"

namespace attn {

class StepWeights {
 public:
  StepWeights() = default;
  // W [out, in] (nn.Linear's layout), packed by a team of num_threads; the
  // bf16 overload keeps bf16.
  static Result<StepWeights> Pack(const float* w, int64_t out, int64_t in,
                                  int num_threads);
  static Result<StepWeights> Pack(const hwy::bfloat16_t* w, int64_t out,
                                  int64_t in, int num_threads);
  // Reads bf16 panels of W [out, in] as Pack lays them out, held elsewhere
  // (a linear's packed copy, kernels::MatMul::PacksAsRowsLinear), which
  // must outlive it.
  static StepWeights Borrow(const hwy::bfloat16_t* panels, int64_t out,
                            int64_t in);

  // y [rows, out] = act(x [rows, in] W^T + bias) (bias [out] or null), for
  // 1 <= rows <= kernels::kRowsLinearMaxRows.
  void Run(const float* x, size_t rows, const float* bias, float* y,
           int num_threads,
           kernels::RowsLinearActivation activation =
               kernels::RowsLinearActivation::kNone) const;

  bool empty() const { return data() == nullptr; }
  // Bytes held (a borrowed one's: none).
  size_t bytes() const { return panels_.size(); }
  size_t in() const { return in_; }
  size_t out() const { return out_; }
  // Bytes Pack gives W [out, in] in fp32, or in bf16 with `bf16`.
  static uint64_t BytesOf(int64_t out, int64_t in, bool bf16);

 private:
  template <typename T>
  static Result<StepWeights> PackAs(const T* w, int64_t out, int64_t in,
                                    int num_threads);

  const void* data() const { return borrowed_ ? borrowed_ : panels_.data(); }

  AlignedBuffer panels_;
  const void* borrowed_ = nullptr;  // else panels_
  bool bf16_ = false;
  size_t in_ = 0, out_ = 0;
};

}  // namespace attn

#endif  // ATTN_ENGINE_OPS_STEP_WEIGHTS_H_
