// Weight, Linear and LinearPlan (see linear.h).
#include "engine/ops/linear.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <new>
#include <tuple>
#include <utility>

#include "kernels/elementwise.h"

namespace attn::ops {

using kernels::DataType;

Result<Weight> Weight::Hold(StreamedVector<float> values, int64_t out,
                            int64_t in, DataType type) {
  if (type == DataType::kBF16) {
    ATTN_ASSIGN_OR_RETURN(StreamedVector<hwy::bfloat16_t> low,
                          RoundToBf16(values));
    return Hold(std::move(low), out, in);
  }
  Weight w;
  w.out_ = out;
  w.in_ = in;
  w.f32_ = std::move(values);
  w.data_ = w.f32_.data();
  return w;
}

Weight Weight::Hold(StreamedVector<hwy::bfloat16_t> values, int64_t out,
                    int64_t in) {
  Weight w;
  w.out_ = out;
  w.in_ = in;
  w.type_ = DataType::kBF16;
  w.bf16_ = std::move(values);
  w.data_ = w.bf16_.data();
  return w;
}

Weight Weight::Borrow(const float* values, int64_t out, int64_t in) {
  Weight w;
  w.out_ = out;
  w.in_ = in;
  w.data_ = values;
  return w;
}

Weight Weight::Borrow(const hwy::bfloat16_t* values, int64_t out, int64_t in) {
  Weight w;
  w.out_ = out;
  w.in_ = in;
  w.type_ = DataType::kBF16;
  w.data_ = values;
  return w;
}

namespace {

Status CheckWholeBlocks(int64_t in, kernels::QuantType quant,
                        const std::string& what) {
  if (in % static_cast<int64_t>(kernels::kQuantBlock) == 0) return {};
  return InvalidArgument(what + " takes " + std::to_string(in) +
                         " inputs, want a multiple of " +
                         std::to_string(kernels::kQuantBlock) + " for " +
                         kernels::QuantName(quant));
}

}  // namespace

Status NotFiniteToQuantize(const std::string& what) {
  return InvalidArgument(what +
                         " holds a value that is not finite (NaN or "
                         "infinity): quantizing needs finite weights");
}

Result<Weight> Weight::Quantize(const float* values, int64_t out, int64_t in,
                                kernels::QuantType quant, int num_threads,
                                const std::string& what) {
  ATTN_RETURN_IF_ERROR(CheckWholeBlocks(in, quant, what));
  const auto n = static_cast<size_t>(out), k = static_cast<size_t>(in);
  ATTN_ASSIGN_OR_RETURN(
      AlignedBuffer blocks,
      AlignedBuffer::Allocate(kernels::QuantRowsBytes(quant, n, k)));
  if (kernels::QuantizeRows(quant, values, n, k, blocks.data(), num_threads) <
      n) {
    return NotFiniteToQuantize(what);
  }
  return FromBlocks(blocks.data(), out, in, quant, num_threads, what);
}

Result<Weight> Weight::Quantize(const hwy::bfloat16_t* values, int64_t out,
                                int64_t in, kernels::QuantType quant,
                                int num_threads, const std::string& what) {
  ATTN_RETURN_IF_ERROR(CheckWholeBlocks(in, quant, what));
  const auto n = static_cast<size_t>(out), k = static_cast<size_t>(in);
  const size_t row_bytes = kernels::QuantRowsBytes(quant, 1, k);
  ATTN_ASSIGN_OR_RETURN(AlignedBuffer blocks,
                        AlignedBuffer::Allocate(row_bytes * n));
  constexpr size_t kRows = 256;
  std::vector<float> rows;
  try {
    rows.resize(std::min(n, kRows) * k);
  } catch (const std::bad_alloc&) {
    return OutOfMemory("cannot allocate rows to quantize");
  }
  for (size_t r0 = 0; r0 < n; r0 += kRows) {
    const size_t count = std::min(kRows, n - r0);
    for (size_t i = 0; i < count * k; ++i) {
      rows[i] = hwy::F32FromBF16(values[r0 * k + i]);
    }
    if (kernels::QuantizeRows(
            quant, rows.data(), count, k,
            static_cast<char*>(blocks.data()) + r0 * row_bytes,
            num_threads) < count) {
      return NotFiniteToQuantize(what);
    }
  }
  return FromBlocks(blocks.data(), out, in, quant, num_threads, what);
}

Result<Weight> Weight::FromBlocks(const void* blocks, int64_t out, int64_t in,
                                  kernels::QuantType quant, int num_threads,
                                  const std::string& what) {
  ATTN_RETURN_IF_ERROR(CheckWholeBlocks(in, quant, what));
  const auto n = static_cast<size_t>(out), k = static_cast<size_t>(in);
  Weight w;
  w.out_ = out;
  w.in_ = in;
  w.quant_ = quant;
  ATTN_ASSIGN_OR_RETURN(
      w.quantized_,
      AlignedBuffer::Allocate(kernels::QuantPackedBytes(quant, n, k)));
  kernels::PackQuantRows(quant, blocks, n, k, w.quantized_.data(), num_threads);
  w.data_ = w.quantized_.data();
  return w;
}

void Weight::DropValues() {
  StreamedVector<float>().swap(f32_);
  StreamedVector<hwy::bfloat16_t>().swap(bf16_);
  data_ = nullptr;
}

// W [out, in] row-major is W^T [in, out] with strides (1, in).
kernels::Operand Weight::Transposed() const {
  return {{in_, out_}, {1, in_}, type_};
}

uint64_t Weight::bytes() const {
  return f32_.size() * sizeof(float) + bf16_.size() * sizeof(hwy::bfloat16_t) +
         quantized_.size();
}

Result<StreamedVector<hwy::bfloat16_t>> RoundToBf16(StreamedVector<float>& w) {
  const auto count = static_cast<int64_t>(w.size());
  ATTN_ASSIGN_OR_RETURN(
      const kernels::Convert down,
      kernels::Convert::Create(count, DataType::kF32, DataType::kBF16));
  ATTN_ASSIGN_OR_RETURN(
      const kernels::Convert up,
      kernels::Convert::Create(count, DataType::kBF16, DataType::kF32));
  StreamedVector<hwy::bfloat16_t> low;
  try {
    low.resize(w.size());
  } catch (const std::bad_alloc&) {
    return OutOfMemory("cannot allocate " + std::to_string(w.size()) +
                       " bf16 weights");
  }
  down.Run(w.data(), low.data());
  up.Run(low.data(), w.data());
  return low;
}

namespace {

// What a matmul is made for: to run, or only to tell its packed layout
// (kernels::MatMul::Describe: no JIT).
enum class MatMulUse { kRun, kLayout };

// `epilogue`'s matmul of `rows` rows of `linear`, with its post-ops and
// types: weights in oneDNN's packed layout, or with `plain`, as the weight
// holds them.
Result<kernels::MatMul> MakeMatMul(const Linear& linear, int64_t rows,
                                   const LinearEpilogue& epilogue, bool plain,
                                   MatMulUse use = MatMulUse::kRun) {
  const auto make = use == MatMulUse::kRun ? &kernels::MatMul::Create
                                           : &kernels::MatMul::Describe;
  const DataType type = epilogue.type.value_or(linear.compute_type());
  const int64_t in = linear.in(), out = linear.out();
  const kernels::Operand* no_bias = nullptr;
  if (epilogue.head_dim > 0) {
    const int64_t D = epilogue.head_dim, G = out / D;
    const kernels::Operand bias{{G, 1, D}, {}, DataType::kF32};
    kernels::Operand weights{{G, in, D}, {}, type};
    if (plain) weights.strides = {D * in, 1, in};
    return make({{1, rows, in}, {}, type}, weights,
                linear.bias() ? &bias : no_bias,
                {{G, rows, D}, {}, epilogue.dst}, kernels::Threading::kTeam,
                epilogue.post);
  }
  const kernels::Operand bias{{1, out}, {}, DataType::kF32};
  kernels::Operand weights{{in, out}, {}, type};
  if (plain) weights.strides = {1, in};
  return make({{rows, in}, {}, type}, weights, linear.bias() ? &bias : no_bias,
              {{rows, out}, {}, epilogue.dst}, kernels::Threading::kTeam,
              epilogue.post);
}

// The weight as a matmul of `epilogue`'s form reads it unpacked.
kernels::Operand PlainView(const Weight& w, const LinearEpilogue& epilogue) {
  if (epilogue.head_dim == 0) return w.Transposed();
  const int64_t D = epilogue.head_dim;
  return {{w.out() / D, w.in(), D}, {D * w.in(), 1, w.in()}, w.type()};
}

// The form of a packed copy of `layout`.
LinearEpilogue FormOf(const PackedLayout& layout) {
  LinearEpilogue form;
  form.type = layout.type;
  form.head_dim = layout.head_dim;
  form.dst = layout.head_dim ? layout.type : DataType::kF32;
  return form;
}

// Whether RowsLinear may run `rows` rows of `epilogue`: fp32 x and y, no
// other type, form or post-op, GELU alone.
bool RowsKernelMayRun(int64_t rows, const LinearEpilogue& epilogue) {
  return epilogue.panels && !epilogue.type && epilogue.head_dim == 0 &&
         rows <= static_cast<int64_t>(kernels::kRowsLinearMaxRows) &&
         !epilogue.post.gelu_tanh && !epilogue.post.add_residual &&
         epilogue.src == DataType::kF32 && epilogue.dst == DataType::kF32;
}

// RowsLinear's panels of `w` in `type`: its own, or bf16 from fp32 values
// that are bf16 already (each converts exactly).
Result<StepWeights> PackPanels(const Weight& w, DataType type,
                               int num_threads) {
  if (w.type() == DataType::kBF16) {
    return StepWeights::Pack(static_cast<const hwy::bfloat16_t*>(w.data()),
                             w.out(), w.in(), num_threads);
  }
  const auto* values = static_cast<const float*>(w.data());
  if (type == DataType::kF32) {
    return StepWeights::Pack(values, w.out(), w.in(), num_threads);
  }
  std::vector<hwy::bfloat16_t> low;
  try {
    low.resize(static_cast<size_t>(w.out() * w.in()));
  } catch (const std::bad_alloc&) {
    return OutOfMemory("cannot allocate a linear's bf16 panels");
  }
  for (size_t i = 0; i < low.size(); ++i) low[i] = hwy::BF16FromF32(values[i]);
  return StepWeights::Pack(low.data(), w.out(), w.in(), num_threads);
}

}  // namespace

Result<Linear> Linear::Create(Weight weight, Weight bias,
                              const LinearLayouts& layouts, int num_threads) {
  Linear linear;
  linear.weight_ = std::move(weight);
  linear.bias_ = std::move(bias);
  const Weight& w = linear.weight_;
  if (w.quant()) {
    if (!layouts.packed.empty() || layouts.panels) {
      return InvalidArgument("a quantized linear takes no packed copies");
    }
    return linear;
  }
  // The first copy of rows' type, else the weight's.
  const auto rows_copy =
      std::find_if(layouts.packed.begin(), layouts.packed.end(),
                   [](const PackedLayout& l) { return l.head_dim == 0; });
  linear.compute_type_ =
      rows_copy != layouts.packed.end() ? rows_copy->type : w.type();
  for (const PackedLayout& layout : layouts.packed) {
    const LinearEpilogue form = FormOf(layout);
    ATTN_ASSIGN_OR_RETURN(kernels::MatMul mm,
                          MakeMatMul(linear, kernels::kMatMulPackedRows, form,
                                     /*plain=*/false, MatMulUse::kLayout));
    ATTN_ASSIGN_OR_RETURN(AlignedBuffer data,
                          AlignedBuffer::Allocate(mm.packed_weights_bytes()));
    ATTN_RETURN_IF_ERROR(
        mm.PackWeights(PlainView(w, form), w.data(), data.data()));
    linear.packed_.push_back({std::move(mm), std::move(data)});
  }
  if (layouts.panels) {
    const Packed* rows =
        rows_copy != layouts.packed.end()
            ? &linear.packed_[size_t(rows_copy - layouts.packed.begin())]
            : nullptr;
    if (*layouts.panels == DataType::kBF16 && rows &&
        rows->layout.PacksAsRowsLinear()) {
      linear.panels_ = StepWeights::Borrow(
          static_cast<const hwy::bfloat16_t*>(rows->data.data()), w.out(),
          w.in());
    } else {
      ATTN_ASSIGN_OR_RETURN(linear.panels_,
                            PackPanels(w, *layouts.panels, num_threads));
    }
  }
  if (layouts.drop_plain && rows_copy != layouts.packed.end() &&
      PackedServesEveryRun(w.out(), w.in(), linear.compute_type_)) {
    linear.weight_.DropValues();
  }
  return linear;
}

Linear Linear::OfShape(int64_t out, int64_t in) {
  Linear shape;
  shape.weight_ = Weight::Borrow(static_cast<const float*>(nullptr), out, in);
  return shape;
}

bool Linear::PanelsArePackedCopy(int64_t out, int64_t in) {
  const Linear shape = OfShape(out, in);
  const Result<kernels::MatMul> mm = MakeMatMul(
      shape, kernels::kMatMulPackedRows, FormOf({DataType::kBF16, 0}),
      /*plain=*/false, MatMulUse::kLayout);
  return mm.ok() && mm->PacksAsRowsLinear();
}

bool Linear::PackedServesEveryRun(int64_t out, int64_t in, DataType type) {
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int64_t, DataType>, bool> known;
  const auto key = std::make_tuple(out, in, type);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = known.find(key); it != known.end()) return it->second;
  }
  // Outside the lock: loads of other shapes go on; two of one shape find
  // the same answer.
  const bool serves = EveryRunReadsPacked(out, in, type);
  const std::lock_guard<std::mutex> lock(mutex);
  known.emplace(key, serves);
  return serves;
}

bool Linear::EveryRunReadsPacked(int64_t out, int64_t in, DataType type) {
  Linear shape = OfShape(out, in);
  shape.compute_type_ = type;
  const Result<kernels::MatMul> packed =
      MakeMatMul(shape, kernels::kMatMulPackedRows, FormOf({type, 0}),
                 /*plain=*/false, MatMulUse::kLayout);
  if (!packed.ok()) return false;
  // The default plan of each row count (LinearPlan::Create) reads the
  // packed copy where its matmul does; past MatMulLayoutRows no layout is new.
  const int64_t last = kernels::MatMulLayoutRows(out);
  for (int64_t rows = 1; rows <= last; ++rows) {
    Result<kernels::MatMul> run =
        MakeMatMul(shape, rows, {}, /*plain=*/false, MatMulUse::kLayout);
    if (!run.ok() || !run->ReadPackedWeightsOf(*packed)) return false;
  }
  return true;
}

Result<uint64_t> Linear::PackedBytes(int64_t out, int64_t in, bool bias,
                                     const PackedLayout& layout) {
  Linear shape = OfShape(out, in);
  static const float kAnyBias = 0.0f;  // only its presence counts
  if (bias) shape.bias_ = Weight::Borrow(&kAnyBias, out, 1);
  ATTN_ASSIGN_OR_RETURN(
      const kernels::MatMul mm,
      MakeMatMul(shape, kernels::kMatMulPackedRows, FormOf(layout),
                 /*plain=*/false, MatMulUse::kLayout));
  return mm.packed_weights_bytes();
}

void Linear::RunFewRows(const float* x, size_t rows, float* y, void* scratch,
                        int num_threads) const {
  const auto k = static_cast<size_t>(in()), n = static_cast<size_t>(out());
  for (size_t r = 0; r < rows; r += kernels::kRowsLinearMaxRows) {
    const size_t group = std::min(rows - r, kernels::kRowsLinearMaxRows);
    if (weight_.quant()) {
      kernels::QuantRowsLinear(*weight_.quant(), x + r * k, group, k,
                               weight_.data(), bias(), n, y + r * n, scratch,
                               num_threads);
    } else {
      panels_.Run(x + r * k, group, bias(), y + r * n, num_threads);
    }
  }
}

size_t Linear::FewRowsScratchBytes() const {
  return weight_.quant()
             ? kernels::QuantRowsLinearScratchBytes(kernels::kRowsLinearMaxRows,
                                                    static_cast<size_t>(in()))
             : 0;
}

uint64_t Linear::bytes() const {
  uint64_t total = weight_.bytes() + bias_.bytes() + panels_.bytes();
  for (const Packed& copy : packed_) total += copy.data.size();
  return total;
}

Result<LinearPlan> LinearPlan::Create(const Linear& like, int64_t rows,
                                      const LinearEpilogue& epilogue,
                                      LinearFallback fallback,
                                      int num_threads) {
  if (like.weight().quant()) {
    return CreateQuantized(like, rows, epilogue, num_threads);
  }
  LinearPlan plan;
  plan.rows_ = rows;
  plan.in_ = like.in();
  plan.num_threads_ = num_threads;
  plan.epilogue_ = epilogue;
  plan.fallback_ = fallback;
  if (like.has_panels() && RowsKernelMayRun(rows, epilogue)) return plan;
  if (epilogue.gelu && epilogue.dst != DataType::kF32) {
    return InvalidArgument("a linear's GELU pass writes fp32 y only");
  }
  const DataType type = epilogue.type.value_or(like.compute_type());
  if (fallback == LinearFallback::kPlain && type != like.weight().type()) {
    return InvalidArgument(
        "a linear packed in another type than its weights cannot fall back "
        "to the plain weights");
  }
  ATTN_ASSIGN_OR_RETURN(kernels::MatMul mm,
                        MakeMatMul(like, rows, epilogue, /*plain=*/false));
  for (size_t i = 0; i < like.packed_.size() && !plan.reads_packed_; ++i) {
    if (mm.ReadPackedWeightsOf(like.packed_[i].layout)) plan.reads_packed_ = i;
  }
  if (!plan.reads_packed_ && like.weight().empty()) {
    return Internal("a linear [" + std::to_string(like.out()) + ", " +
                    std::to_string(like.in()) +
                    "] without its plain "
                    "weights cannot run " +
                    std::to_string(rows) +
                    " rows: they do not read its packed copy");
  }
  if (!plan.reads_packed_ && fallback == LinearFallback::kPlain) {
    ATTN_ASSIGN_OR_RETURN(mm, MakeMatMul(like, rows, epilogue, /*plain=*/true));
  }
  plan.matmul_.emplace(std::move(mm));
  if (type != epilogue.src) {
    ATTN_ASSIGN_OR_RETURN(
        plan.to_bf16_,
        kernels::Convert::Create(rows * like.in(), epilogue.src, type));
  }
  return plan;
}

Result<LinearPlan> LinearPlan::CreateQuantized(const Linear& like, int64_t rows,
                                               const LinearEpilogue& epilogue,
                                               int num_threads) {
  if (epilogue.type || epilogue.head_dim > 0 ||
      epilogue.src != DataType::kF32 || epilogue.dst != DataType::kF32) {
    return InvalidArgument(
        "a quantized linear runs fp32 rows, not another type or head planes");
  }
  LinearPlan plan;
  plan.rows_ = rows;
  plan.in_ = like.in();
  plan.num_threads_ = num_threads;
  plan.epilogue_ = epilogue;
  plan.quant_ = like.weight().quant();
  return plan;
}

size_t LinearPlan::lowered_input_bytes() const {
  if (!to_bf16_) return 0;
  return static_cast<size_t>(rows_) * static_cast<size_t>(in_) *
         kernels::SizeOf(DataType::kBF16);
}

size_t LinearPlan::scratch_bytes() const {
  if (quant_) {
    const auto rows =
        std::min(static_cast<size_t>(rows_), kernels::kRowsLinearMaxRows);
    return kernels::QuantRowsLinearScratchBytes(rows, static_cast<size_t>(in_));
  }
  return matmul_ ? matmul_->scratch_bytes() * static_cast<size_t>(num_threads_)
                 : 0;
}

size_t LinearPlan::own_packed_bytes() const {
  const bool own =
      matmul_ && !reads_packed_ && fallback_ == LinearFallback::kOwnPacked;
  return own ? matmul_->packed_weights_bytes() : 0;
}

Status LinearPlan::PackOwn(const Linear& linear, void* dst) const {
  const Weight& w = linear.weight();
  return matmul_->PackWeights(PlainView(w, epilogue_), w.data(), dst);
}

const void* LinearPlan::MatMulWeights(const Linear& linear,
                                      const Buffers& buffers) const {
  if (reads_packed_) {
    // Linears a plan serves share their layouts (a model's layers).
    HWY_DASSERT(*reads_packed_ < linear.packed_.size());
    return linear.packed_[*reads_packed_].data.data();
  }
  return fallback_ == LinearFallback::kPlain ? linear.weight().data()
                                             : buffers.own_packed;
}

void LinearPlan::RunQuantRows(const Linear& linear, const float* x, float* y,
                              void* scratch, int num_threads,
                              const float* residual) const {
  const size_t count = static_cast<size_t>(rows_ * linear.out());
  linear.RunFewRows(x, static_cast<size_t>(rows_), y, scratch, num_threads);
  // The matmul's post-ops, in its order.
  if (epilogue_.gelu || epilogue_.post.gelu_tanh) {
    kernels::Gelu(y, y, count, num_threads);
  }
  if (epilogue_.post.add_residual) {
    kernels::Add(y, residual, y, count, num_threads);
  }
}

void LinearPlan::Run(const Linear& linear, const void* x, void* y,
                     const Buffers& buffers, int num_threads,
                     const void* residual) const {
  if (quant_) {
    RunQuantRows(linear, static_cast<const float*>(x), static_cast<float*>(y),
                 buffers.scratch, num_threads,
                 static_cast<const float*>(residual));
    return;
  }
  if (!matmul_) {
    linear.panels().Run(static_cast<const float*>(x),
                        static_cast<size_t>(rows_), linear.bias(),
                        static_cast<float*>(y), num_threads,
                        epilogue_.gelu ? kernels::RowsLinearActivation::kGelu
                                       : kernels::RowsLinearActivation::kNone);
    return;
  }
  if (to_bf16_) {
    to_bf16_->Run(x, buffers.lowered_input);
    x = buffers.lowered_input;
  }
  matmul_->Run(x, MatMulWeights(linear, buffers), linear.bias(), y,
               buffers.scratch, num_threads, residual);
  if (epilogue_.gelu) {
    auto* out = static_cast<float*>(y);
    kernels::Gelu(out, out, static_cast<size_t>(rows_ * linear.out()),
                  num_threads);
  }
}

}  // namespace attn::ops
