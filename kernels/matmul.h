// dst = src x wei (+ bias) backed by one oneDNN matmul primitive: created once,
// executed many times. The only file that includes oneDNN headers is
// matmul.cc; every other kernel talks to oneDNN through this class.
#ifndef ATTN_KERNELS_MATMUL_H_
#define ATTN_KERNELS_MATMUL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "attn/status.hpp"

namespace attn::kernels {

enum class DataType { kF32, kBF16 };

size_t SizeOf(DataType type);

// One operand of a (batched) matmul: dims and strides in elements, outermost
// first. Empty `strides` means dense row-major, except for weights where it
// lets oneDNN pick a packed layout (see MatMul::PackWeights).
struct Operand {
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;
  DataType type = DataType::kF32;
};

// Element-wise steps oneDNN applies to dst = src x wei + bias before storing
// it, in this order: gelu, then the residual add.
struct PostOps {
  bool gelu_tanh = false;  // dst = gelu(dst), the tanh approximation
  // dst = dst + residual, residual shaped and laid out like dst (Run's
  // `residual`). Exact: one f32 addition, as PyTorch's x + linear(h).
  bool add_residual = false;
};

class MatMul {
 public:
  // `bias`, if given, broadcasts over dims of size 1. Creating may JIT code.
  // With `single_threaded`, the primitive is created for execution inside
  // one worker of an OpenMP team (its blocking then does not depend on the
  // team size).
  static Result<MatMul> Create(const Operand& src, const Operand& wei,
                               const Operand* bias, const Operand& dst,
                               bool single_threaded = false,
                               const PostOps& post_ops = {});

  MatMul(MatMul&&) noexcept;
  MatMul& operator=(MatMul&&) noexcept;
  ~MatMul();

  // Bytes of per-call scratch Run needs; one buffer per concurrent caller.
  size_t scratch_bytes() const;
  // Bytes of the weights in the primitive's own layout.
  size_t packed_weights_bytes() const;
  // Reorders weights laid out as `plain` into the primitive's layout.
  Status PackWeights(const Operand& plain, const void* plain_data,
                     void* packed) const;
  // Executes on the caller's thread (inside an OpenMP region: that thread
  // alone; outside: the whole team). Pointers must match the operands given
  // to Create; `wei` is in the packed layout when Create was asked for one.
  // Thread-safe when each concurrent caller passes its own `scratch`.
  // `residual` is read only with PostOps::add_residual.
  void Run(const void* src, const void* wei, const void* bias, void* dst,
           void* scratch, const void* residual = nullptr) const;

  // oneDNN's name for the implementation it chose, e.g. "brg:avx512_core".
  const char* impl_name() const;

 private:
  struct Impl;
  explicit MatMul(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Converts `count` values between data types (oneDNN reorder; rounds to
// nearest even), using the calling thread's OpenMP team.
class Convert {
 public:
  static Result<Convert> Create(int64_t count, DataType from, DataType to);
  Convert(Convert&&) noexcept;
  Convert& operator=(Convert&&) noexcept;
  ~Convert();
  void Run(const void* src, void* dst) const;

 private:
  struct Impl;
  explicit Convert(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The instruction set oneDNN dispatches to, e.g. "avx512_core_bf16".
const char* MatMulIsaName();
// True when oneDNN can run bf16 matmuls natively on this CPU.
bool HasNativeBF16();

}  // namespace attn::kernels

#endif  // ATTN_KERNELS_MATMUL_H_
