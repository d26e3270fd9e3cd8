// oneDNN matmul wrapper (see matmul.h). The one place that catches
// dnnl::error and turns it into a Status.
#include "kernels/matmul.h"

#include <omp.h>

#include <new>
#include <string>
#include <unordered_map>

#include "oneapi/dnnl/dnnl.hpp"

namespace attn::kernels {
namespace {

using dnnl::memory;

const dnnl::engine& CpuEngine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

memory::data_type ToDnnl(DataType type) {
  return type == DataType::kBF16 ? memory::data_type::bf16
                                 : memory::data_type::f32;
}

memory::desc ToDesc(const Operand& op, bool allow_any) {
  if (op.strides.empty()) {
    if (allow_any) {
      return memory::desc(op.dims, ToDnnl(op.type), memory::format_tag::any);
    }
    memory::dims strides(op.dims.size(), 1);
    for (size_t i = op.dims.size(); i-- > 1;) {
      strides[i - 1] = strides[i] * op.dims[i];
    }
    return memory::desc(op.dims, ToDnnl(op.type), strides);
  }
  return memory::desc(op.dims, ToDnnl(op.type), op.strides);
}

}  // namespace

size_t SizeOf(DataType type) { return type == DataType::kBF16 ? 2 : 4; }

struct MatMul::Impl {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  bool has_bias = false;
  bool has_residual = false;
  int residual_index = 0;  // of the binary post-op
};

MatMul::MatMul(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MatMul::MatMul(MatMul&&) noexcept = default;
MatMul& MatMul::operator=(MatMul&&) noexcept = default;
MatMul::~MatMul() = default;

Result<MatMul> MatMul::Create(const Operand& src, const Operand& wei,
                              const Operand* bias, const Operand& dst,
                              bool single_threaded, const PostOps& post_ops) {
  // Restores the caller's team size however Create leaves.
  struct TeamSize {
    int saved = omp_get_max_threads();
    ~TeamSize() { omp_set_num_threads(saved); }
  } team;
  if (single_threaded) omp_set_num_threads(1);
  try {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const memory::desc src_md = ToDesc(src, false);
    const memory::desc wei_md = ToDesc(wei, true);
    const memory::desc dst_md = ToDesc(dst, false);
    auto impl = std::make_unique<Impl>();
    impl->has_bias = bias != nullptr;
    dnnl::post_ops ops;
    if (post_ops.gelu_tanh) {
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_tanh, 0.f, 0.f);
    }
    if (post_ops.add_residual) {
      // A binary add reads the residual wherever it lives; a sum post-op
      // would need it copied into dst first.
      impl->has_residual = true;
      impl->residual_index = ops.len();
      ops.append_binary(dnnl::algorithm::binary_add, dst_md);
    }
    attr.set_post_ops(ops);
    const auto desc =
        bias ? dnnl::matmul::desc(src_md, wei_md, ToDesc(*bias, false), dst_md)
             : dnnl::matmul::desc(src_md, wei_md, dst_md);
    impl->pd = dnnl::matmul::primitive_desc(desc, attr, CpuEngine());
    impl->prim = dnnl::matmul(impl->pd);
    return MatMul(std::move(impl));
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN could not create a matmul: ") +
                    e.what() + " (status " +
                    std::to_string(static_cast<int>(e.status)) + ")");
  } catch (const std::bad_alloc&) {
    return OutOfMemory("cannot allocate a oneDNN matmul primitive");
  }
}

size_t MatMul::scratch_bytes() const {
  return impl_->pd.scratchpad_desc().get_size();
}

size_t MatMul::packed_weights_bytes() const {
  return impl_->pd.weights_desc().get_size();
}

Status MatMul::PackWeights(const Operand& plain, const void* plain_data,
                           void* packed) const {
  try {
    const auto& engine = CpuEngine();
    dnnl::stream stream(engine);
    memory from(ToDesc(plain, false), engine, const_cast<void*>(plain_data));
    memory to(impl_->pd.weights_desc(), engine, packed);
    dnnl::reorder(from, to).execute(stream, from, to);
    stream.wait();
    return {};
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN could not pack weights: ") + e.what());
  }
}

void MatMul::Run(const void* src, const void* wei, const void* bias, void* dst,
                 void* scratch, const void* residual) const {
  const auto& engine = CpuEngine();
  thread_local dnnl::stream stream(engine);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC,
       memory(impl_->pd.src_desc(), engine, const_cast<void*>(src))},
      {DNNL_ARG_WEIGHTS,
       memory(impl_->pd.weights_desc(), engine, const_cast<void*>(wei))},
      {DNNL_ARG_DST, memory(impl_->pd.dst_desc(), engine, dst)},
      {DNNL_ARG_SCRATCHPAD,
       memory(impl_->pd.scratchpad_desc(), engine, scratch)}};
  if (impl_->has_bias) {
    args.emplace(DNNL_ARG_BIAS, memory(impl_->pd.bias_desc(), engine,
                                       const_cast<void*>(bias)));
  }
  if (impl_->has_residual) {
    args.emplace(
        DNNL_ARG_ATTR_MULTIPLE_POST_OP(impl_->residual_index) | DNNL_ARG_SRC_1,
        memory(impl_->pd.dst_desc(), engine, const_cast<void*>(residual)));
  }
  impl_->prim.execute(stream, args);
}

const char* MatMul::impl_name() const { return impl_->pd.impl_info_str(); }

struct Convert::Impl {
  memory::desc src_md, dst_md;
  dnnl::reorder prim;
};

Convert::Convert(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Convert::Convert(Convert&&) noexcept = default;
Convert& Convert::operator=(Convert&&) noexcept = default;
Convert::~Convert() = default;

Result<Convert> Convert::Create(int64_t count, DataType from, DataType to) {
  try {
    auto impl = std::make_unique<Impl>();
    impl->src_md = ToDesc({{count}, {}, from}, false);
    impl->dst_md = ToDesc({{count}, {}, to}, false);
    impl->prim = dnnl::reorder(dnnl::reorder::primitive_desc(
        CpuEngine(), impl->src_md, CpuEngine(), impl->dst_md));
    return Convert(std::move(impl));
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN could not create a reorder: ") +
                    e.what());
  }
}

void Convert::Run(const void* src, void* dst) const {
  const auto& engine = CpuEngine();
  thread_local dnnl::stream stream(engine);
  memory from(impl_->src_md, engine, const_cast<void*>(src));
  memory to(impl_->dst_md, engine, dst);
  impl_->prim.execute(stream, from, to);
}

const char* MatMulIsaName() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

bool HasNativeBF16() {
  const auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 ||
         isa == dnnl::cpu_isa::avx512_core_amx;
}

}  // namespace attn::kernels
