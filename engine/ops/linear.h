// Weight, Linear and LinearPlan: every y = x W^T (+ b) of a model, whatever
// its weight type. A Weight is a typed matrix; a Linear is a model's weight,
// bias and the layouts its kernels read, made once at load and immutable
// after; a LinearPlan is how a run of some row count executes, made once per
// row count and shared by every linear of one shape (a model's layers). A new
// weight type is a kernels::DataType, its layouts here and its kernels.
#ifndef ATTN_ENGINE_OPS_LINEAR_H_
#define ATTN_ENGINE_OPS_LINEAR_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attn/attn.hpp"
#include "attn/status.hpp"
#include "engine/ops/step_weights.h"
#include "engine/runtime/buffer.h"
#include "engine/runtime/huge_pages.h"
#include "hwy/base.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/rows_linear.h"

namespace attn::ops {

// The kernels' type for a model dtype (a quantized one's activations:
// fp32).
inline kernels::DataType ToDataType(DType dtype) {
  return dtype == DType::kBF16 ? kernels::DataType::kBF16
                               : kernels::DataType::kF32;
}

// The block format of a quantized dtype; none for f32 and bf16.
inline std::optional<kernels::QuantType> QuantTypeOf(DType dtype) {
  if (dtype == DType::kQ8_0) return kernels::QuantType::kQ8_0;
  if (dtype == DType::kQ4_0) return kernels::QuantType::kQ4_0;
  return std::nullopt;
}
// Its inverse.
inline DType DTypeOf(kernels::QuantType quant) {
  return quant == kernels::QuantType::kQ8_0 ? DType::kQ8_0 : DType::kQ4_0;
}

// The error for weights `what` (a quoted tensor name, say) holding NaN or
// infinity, which no quantized block represents.
Status NotFiniteToQuantize(const std::string& what);

// W [out, in], nn.Linear's layout, held in its type or borrowed, or
// quantized into blocks of 32 along `in` as the quantized kernels read them;
// a bias is one of [out, 1], fp32.
class Weight {
 public:
  Weight() = default;
  Weight(Weight&&) noexcept = default;
  Weight& operator=(Weight&&) noexcept = default;

  // Holds `values` in `type`: kF32 as they are, kBF16 rounded to nearest
  // even (the fp32 values are then dropped).
  static Result<Weight> Hold(StreamedVector<float> values, int64_t out,
                             int64_t in, kernels::DataType type);
  static Weight Hold(StreamedVector<hwy::bfloat16_t> values, int64_t out,
                     int64_t in);
  // Reads fp32 or bf16 values held elsewhere (a tied head's embeddings),
  // which must outlive the weight.
  static Weight Borrow(const float* values, int64_t out, int64_t in);
  static Weight Borrow(const hwy::bfloat16_t* values, int64_t out, int64_t in);
  // Quantizes `values` [out, in] into `quant`'s blocks as llama.cpp's
  // reference quantizer does, packed by a team of `num_threads`; `in` a
  // multiple of kernels::kQuantBlock and every value finite (else
  // InvalidArgument naming `what`).
  static Result<Weight> Quantize(const float* values, int64_t out, int64_t in,
                                 kernels::QuantType quant, int num_threads,
                                 const std::string& what);
  // The same from bf16 values, widened a few rows at a time.
  static Result<Weight> Quantize(const hwy::bfloat16_t* values, int64_t out,
                                 int64_t in, kernels::QuantType quant,
                                 int num_threads, const std::string& what);
  // Packs `blocks` (out rows of in / 32 blocks of `quant`, llama.cpp's
  // layout: a quantized file's) as Quantize packs the blocks it makes.
  static Result<Weight> FromBlocks(const void* blocks, int64_t out, int64_t in,
                                   kernels::QuantType quant, int num_threads,
                                   const std::string& what);

  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  // A quantized weight's: kF32, the type of what it stands for.
  kernels::DataType type() const { return type_; }
  const std::optional<kernels::QuantType>& quant() const { return quant_; }
  // The values as held; null once dropped (DropValues) or for none.
  const void* data() const { return data_; }
  bool empty() const { return data_ == nullptr; }
  // Frees the values (a borrowed weight's: forgets them), keeping the shape.
  void DropValues();
  // W^T [in, out] over data(), as a matmul reads the plain values (not for
  // quantized weights).
  kernels::Operand Transposed() const;
  // Bytes held (a borrowed weight's: none).
  uint64_t bytes() const;

 private:
  int64_t out_ = 0, in_ = 0;
  kernels::DataType type_ = kernels::DataType::kF32;
  const void* data_ = nullptr;
  StreamedVector<float> f32_;
  StreamedVector<hwy::bfloat16_t> bf16_;
  std::optional<kernels::QuantType> quant_;
  AlignedBuffer quantized_;
};

// Rounds `w` to bf16 in place (to nearest even) and returns the bf16
// values: both then hold the same numbers.
Result<StreamedVector<hwy::bfloat16_t>> RoundToBf16(StreamedVector<float>& w);

// A copy of a weight packed for oneDNN's matmuls of kMatMulPackedRows rows
// in `type` (the weight's own, or bf16 for a bf16 run of fp32 weights),
// which every run of kernels::MatMulWideRows() rows or more in that form
// reads: x [rows, in] W^T, or with head_dim > 0 the head planes
// [out / head_dim, rows, head_dim] of x [1, rows, in] and W viewed as
// [out / head_dim, in, head_dim] (attention's fused projection without a
// cache, whose core reads each head densely).
struct PackedLayout {
  kernels::DataType type = kernels::DataType::kF32;
  int64_t head_dim = 0;
};

// The layouts a Linear keeps besides its plain weight.
struct LinearLayouts {
  std::vector<PackedLayout> packed;
  // RowsLinear's panels, which runs of up to kRowsLinearMaxRows rows read
  // (the model decodes), in this type: the weight's own, or bf16 for fp32
  // weights already rounded to bf16 (so that both hold the same numbers).
  std::optional<kernels::DataType> panels;
  // Drop the plain weight once the layouts are made, where runs of every
  // row count read the first packed copy of rows or the panels
  // (Linear::PackedServesEveryRun): a model that runs only those holds one
  // copy fewer.
  bool drop_plain = false;
};

class Linear {
 public:
  Linear() = default;
  Linear(Linear&&) noexcept = default;
  Linear& operator=(Linear&&) noexcept = default;

  // The weight, a bias of `out` fp32 values (empty: none), and the layouts
  // made from the weight by a team of `num_threads`.
  static Result<Linear> Create(Weight weight, Weight bias,
                               const LinearLayouts& layouts, int num_threads);
  // Bytes of the copy of a weight [out, in] (with a bias or not) packed as
  // `layout`: what Create allocates for it.
  static Result<uint64_t> PackedBytes(int64_t out, int64_t in, bool bias,
                                      const PackedLayout& layout);
  // Whether the default plan of every row count of a weight [out, in] with
  // a packed copy of rows in `type` (and no panels) reads that copy: where
  // oneDNN lays it out in blocks of columns that narrower tiles read in
  // place, as its brgemm kernels do (AVX-512), not its gemm (AVX2). Known
  // per shape once made.
  static bool PackedServesEveryRun(int64_t out, int64_t in,
                                   kernels::DataType type);
  // Whether bf16 panels of a weight [out, in] are its packed copy of rows
  // in bf16, laid out as RowsLinear reads them
  // (kernels::MatMul::PacksAsRowsLinear): Create then makes no panels of
  // their own.
  static bool PanelsArePackedCopy(int64_t out, int64_t in);

  const Weight& weight() const { return weight_; }
  // The type its matmuls run in unless a plan says otherwise: its first
  // packed copy of rows' type, else the weight's.
  kernels::DataType compute_type() const { return compute_type_; }
  int64_t in() const { return weight_.in(); }
  int64_t out() const { return weight_.out(); }
  const float* bias() const { return static_cast<const float*>(bias_.data()); }
  bool has_panels() const { return !panels_.empty(); }
  const StepWeights& panels() const { return panels_; }
  // y [rows, out] = x [rows, in] W^T + b for any rows, in groups of
  // kRowsLinearMaxRows on the panels or the quantized weight (which needs
  // FewRowsScratchBytes() of `scratch`).
  void RunFewRows(const float* x, size_t rows, float* y, void* scratch,
                  int num_threads) const;
  size_t FewRowsScratchBytes() const;
  // Bytes held: the weight, bias, packed copies and panels (not what they
  // borrow).
  uint64_t bytes() const;

 private:
  friend class LinearPlan;  // finds the packed copy its matmul reads
  struct Packed {
    kernels::MatMul layout;  // the matmul that packed it
    AlignedBuffer data;
  };
  // A linear [out, in] of fp32 weights without values: what a shape alone
  // tells.
  static Linear OfShape(int64_t out, int64_t in);
  // PackedServesEveryRun's answer, from the layout of each row count's
  // matmul (kernels::MatMul::Describe) as LinearPlan::Create reads it.
  static bool EveryRunReadsPacked(int64_t out, int64_t in,
                                  kernels::DataType type);

  Weight weight_, bias_;
  kernels::DataType compute_type_ = kernels::DataType::kF32;
  std::vector<Packed> packed_;
  StepWeights panels_;
};

// How a plan runs a linear: the matmul's type and the form of its output,
// what runs after x W^T + b, and the types of x and y.
struct LinearEpilogue {
  // The matmul's type (none: the linear's compute_type()), and with
  // head_dim > 0 the head planes of PackedLayout (either: never RowsLinear,
  // whose type is its panels').
  std::optional<kernels::DataType> type;
  int64_t head_dim = 0;
  // RowsLinear may run up to kRowsLinearMaxRows rows when the linear has
  // panels; false keeps the matmul's order of sums at every row count.
  bool panels = true;
  // GELU (tanh) after the bias: by the RowsLinear kernel on a few rows, or
  // kernels::Gelu after a matmul.
  bool gelu = false;
  // oneDNN's own post-ops on a matmul (RowsLinear takes none of these).
  kernels::PostOps post;
  // x is fp32, or already in the matmul's type; y fp32 or bf16.
  kernels::DataType src = kernels::DataType::kF32;
  kernels::DataType dst = kernels::DataType::kF32;
};

// Where a matmul that cannot read a linear's packed copy finds its weights:
// the plain ones (no second copy), or a copy packed for it by the caller
// from them. Either needs the plain weights: a plan of a linear that
// dropped them refuses to fall back.
enum class LinearFallback { kPlain, kOwnPacked };

// How `rows` rows of linears shaped like one run: RowsLinear on the panels
// for up to kRowsLinearMaxRows rows when the linear has them, the epilogue
// allows them and is at most GELU on fp32 x and y, else a matmul of fixed
// tiles (kernels::Threading::kTeam) in the epilogue's type, on a packed
// copy where the tiles read one, else on the fallback (kPlain: only for
// weights held in that type). bf16 runs convert an fp32 x first.
// Quantized weights (no packed copies or panels): kernels::QuantRowsLinear
// over groups of kRowsLinearMaxRows rows at every row count, on fp32 x and
// y. On a Zen 5 its int8 dot products prefill a Llama 3.2 1B shape of 128
// tokens 1.7-1.9x as fast as dequantizing each weight into bf16 for
// oneDNN's matmul.
class LinearPlan {
 public:
  // The buffers of a Run, owned by the caller: a bf16 x converted, the
  // matmul's per-thread scratch, and (kOwnPacked, when the plan needs it)
  // the weights packed for this plan (PackOwn).
  struct Buffers {
    void* lowered_input = nullptr;
    void* scratch = nullptr;
    const void* own_packed = nullptr;
  };

  static Result<LinearPlan> Create(const Linear& like, int64_t rows,
                                   const LinearEpilogue& epilogue,
                                   LinearFallback fallback, int num_threads);
  LinearPlan(LinearPlan&&) noexcept = default;
  LinearPlan& operator=(LinearPlan&&) noexcept = default;

  int64_t rows() const { return rows_; }
  bool uses_panels() const { return !matmul_ && !quant_; }
  size_t lowered_input_bytes() const;
  size_t scratch_bytes() const;
  // Bytes of the copy kOwnPacked needs: 0 when the plan reads the linear's.
  size_t own_packed_bytes() const;
  // Packs `linear`'s weight as this plan reads it into `dst`
  // (own_packed_bytes() bytes).
  Status PackOwn(const Linear& linear, void* dst) const;

  // y [rows, out] from x [rows, in] for `linear`, shaped as the plan's.
  // `residual` ([rows, out] like y) only with post.add_residual.
  // At most the plan's num_threads: fewer inside a parallel region.
  void Run(const Linear& linear, const void* x, void* y, const Buffers& buffers,
           int num_threads, const void* residual = nullptr) const;

 private:
  LinearPlan() = default;
  static Result<LinearPlan> CreateQuantized(const Linear& like, int64_t rows,
                                            const LinearEpilogue& epilogue,
                                            int num_threads);
  const void* MatMulWeights(const Linear& linear, const Buffers& buffers) const;
  void RunQuantRows(const Linear& linear, const float* x, float* y,
                    void* scratch, int num_threads,
                    const float* residual) const;

  int64_t rows_ = 0, in_ = 0;
  int num_threads_ = 1;
  LinearEpilogue epilogue_;
  LinearFallback fallback_ = LinearFallback::kPlain;
  std::optional<kernels::MatMul> matmul_;  // none: RowsLinear
  std::optional<size_t> reads_packed_;     // the linear's copy it reads
  std::optional<kernels::Convert> to_bf16_;
  std::optional<kernels::QuantType> quant_;  // a quantized linear's
};

}  // namespace attn::ops

#endif  // ATTN_ENGINE_OPS_LINEAR_H_
