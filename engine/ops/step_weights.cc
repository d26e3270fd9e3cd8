// StepWeights (step_weights.h): packing a linear's weights into RowsLinear's
// panels once, and running a decode step's few rows on them.
#include "engine/ops/step_weights.h"

#include <type_traits>

#include "kernels/rows_linear.h"

namespace attn {

template <typename T>
Result<StepWeights> StepWeights::PackAs(const T* w, int64_t out, int64_t in,
                                        int num_threads) {
  StepWeights step;
  step.bf16_ = std::is_same_v<T, hwy::bfloat16_t>;
  step.in_ = static_cast<size_t>(in);
  step.out_ = static_cast<size_t>(out);
  ATTN_ASSIGN_OR_RETURN(step.panels_,
                        AlignedBuffer::Allocate(BytesOf(out, in, step.bf16_)));
  kernels::PackRowsLinear(w, step.out_, step.in_,
                          static_cast<T*>(step.panels_.data()), num_threads);
  return step;
}

StepWeights StepWeights::Borrow(const hwy::bfloat16_t* panels, int64_t out,
                                int64_t in) {
  StepWeights step;
  step.bf16_ = true;
  step.in_ = static_cast<size_t>(in);
  step.out_ = static_cast<size_t>(out);
  step.borrowed_ = panels;
  return step;
}

Result<StepWeights> StepWeights::Pack(const float* w, int64_t out, int64_t in,
                                      int num_threads) {
  return PackAs(w, out, in, num_threads);
}

Result<StepWeights> StepWeights::Pack(const hwy::bfloat16_t* w, int64_t out,
                                      int64_t in, int num_threads) {
  return PackAs(w, out, in, num_threads);
}

uint64_t StepWeights::BytesOf(int64_t out, int64_t in, bool bf16) {
  const auto n = static_cast<size_t>(out), k = static_cast<size_t>(in);
  const size_t elements =
      bf16 ? kernels::RowsLinearPackedSize<hwy::bfloat16_t>(n, k)
           : kernels::RowsLinearPackedSize<float>(n, k);
  return MulSat(elements, bf16 ? sizeof(hwy::bfloat16_t) : sizeof(float));
}

void StepWeights::Run(const float* x, size_t rows, const float* bias, float* y,
                      int num_threads,
                      kernels::RowsLinearActivation activation) const {
  if (bf16_) {
    kernels::RowsLinear(x, rows, in_,
                        static_cast<const hwy::bfloat16_t*>(data()), bias, out_,
                        y, num_threads, activation);
  } else {
    kernels::RowsLinear(x, rows, in_, static_cast<const float*>(data()), bias,
                        out_, y, num_threads, activation);
  }
}

}  // namespace attn
