// oneDNN matmul wrapper (see matmul.h). The one place that catches
// dnnl::error and turns it into a Status.
#include "kernels/matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "hwy/base.h"
#include "kernels/threads.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace attn::kernels {

size_t SizeOf(DataType type) { return type == DataType::kBF16 ? 2 : 4; }

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

// An operand's strides, dense row-major when none were given.
memory::dims StridesOf(const Operand& op) {
  if (!op.strides.empty()) return op.strides;
  memory::dims strides(op.dims.size(), 1);
  for (size_t i = op.dims.size(); i-- > 1;) {
    strides[i - 1] = strides[i] * op.dims[i];
  }
  return strides;
}

// With `allow_any` and no strides given, oneDNN picks the layout.
memory::desc ToDesc(const Operand& op, bool allow_any) {
  if (allow_any && op.strides.empty()) {
    return memory::desc(op.dims, ToDnnl(op.type), memory::format_tag::any);
  }
  return memory::desc(op.dims, ToDnnl(op.type), StridesOf(op));
}

// One dimension of dst cut into `count` tiles of `size`, the last `last`.
struct Tiles {
  int64_t size = 0, count = 0, last = 0;

  // The fewest tiles of at most `most`, as even as one size allows.
  static Tiles Of(int64_t total, int64_t most) {
    const int64_t fewest = (total + most - 1) / most;
    return Blocks(total, (total + fewest - 1) / fewest);
  }
  // Tiles of `size`, the last one shorter: tiles of one size start on
  // every multiple of it.
  static Tiles Blocks(int64_t total, int64_t size) {
    const int64_t count = (total + size - 1) / size;
    return {size, count, total - (count - 1) * size};
  }
  int64_t SizeOf(int64_t i) const { return i + 1 < count ? size : last; }
};

// The part of dst a tile computes: rows [m0, m0 + rows) and columns
// [n0, n0 + cols) of batch b. Every tile is a 2-D matmul: oneDNN 2.6 runs a
// batched one with a strided dst on its reference code.
struct Box {
  int64_t b = 0, m0 = 0, n0 = 0, rows = 0, cols = 0;
};

// Which of an operand's two inner dims follow the box's rows and columns
// (-1: neither; the dim is taken whole). Batch dims of 1 broadcast.
struct Role {
  int row_dim, col_dim;
};
constexpr Role kSrcRole{0, -1}, kWeiRole{-1, 1}, kDstRole{0, 1};

// The 2-D part of `op` the box covers, with explicit strides.
Operand Cut(const Operand& op, const Box& box, Role role) {
  const memory::dims strides = StridesOf(op);
  const size_t inner = op.dims.size() - 2;
  Operand cut{{op.dims[inner], op.dims[inner + 1]},
              {strides[inner], strides[inner + 1]},
              op.type};
  if (role.row_dim >= 0) cut.dims[role.row_dim] = box.rows;
  if (role.col_dim >= 0) cut.dims[role.col_dim] = box.cols;
  return cut;
}

// Byte offset of the box's first element in `op`.
size_t OffsetOf(const Operand& op, const Box& box, Role role) {
  const memory::dims strides = StridesOf(op);
  const size_t inner = op.dims.size() - 2;
  int64_t elements = 0;
  if (inner == 1 && op.dims[0] != 1) elements += box.b * strides[0];
  if (role.row_dim >= 0) elements += box.m0 * strides[inner + role.row_dim];
  if (role.col_dim >= 0) elements += box.n0 * strides[inner + role.col_dim];
  return static_cast<size_t>(elements) * SizeOf(op.type);
}

size_t AlignUp(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Byte offset in packed weights `whole` [K, N] of columns [n0, n0 + cols)
// laid out as `part` [K, cols] lays them, when they lie there byte for
// byte: the same blocked layout (blocks, block strides, padded K), n0 a
// whole number of column blocks in, and `part` ending on a block edge or
// where `whole` ends (its padding then is whole's). Nullopt otherwise.
std::optional<size_t> ColumnsInside(const memory::desc& whole,
                                    const memory::desc& part, int64_t n0) {
  const dnnl_memory_desc_t& w = whole.data;
  const dnnl_memory_desc_t& p = part.data;
  if (w.ndims != 2 || p.ndims != 2 || w.format_kind != dnnl_blocked ||
      p.format_kind != dnnl_blocked || w.data_type != p.data_type ||
      w.extra.flags != 0 || p.extra.flags != 0 || w.offset0 != 0 ||
      p.offset0 != 0 || w.dims[0] != p.dims[0] ||
      w.padded_dims[0] != p.padded_dims[0]) {
    return std::nullopt;
  }
  const dnnl_blocking_desc_t& wb = w.format_desc.blocking;
  const dnnl_blocking_desc_t& pb = p.format_desc.blocking;
  if (wb.inner_nblks != pb.inner_nblks || wb.strides[0] != pb.strides[0] ||
      wb.strides[1] != pb.strides[1]) {
    return std::nullopt;
  }
  int64_t col_block = 1;
  for (int i = 0; i < wb.inner_nblks; ++i) {
    if (wb.inner_blks[i] != pb.inner_blks[i] ||
        wb.inner_idxs[i] != pb.inner_idxs[i]) {
      return std::nullopt;
    }
    if (wb.inner_idxs[i] == 1) col_block *= wb.inner_blks[i];
  }
  const int64_t cols = p.dims[1];
  const bool ends_on_edge = cols % col_block == 0 || n0 + cols == w.dims[1];
  if (n0 % col_block != 0 || n0 + cols > w.dims[1] || !ends_on_edge) {
    return std::nullopt;
  }
  return static_cast<size_t>(n0 / col_block * wb.strides[1]) *
         dnnl_data_type_size(w.data_type);
}

}  // namespace

// One primitive per distinct tile shape (full tiles and tails), and per tile
// where its operands start.
struct MatMul::Impl {
  struct Kind {
    int64_t rows, cols;
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    // dst is a dense buffer after the worker's scratch, copied out (plus
    // the residual) by the worker: oneDNN 2.6's brgemm refuses a strided
    // dst or binary operand, and its fallbacks run 25% (gemm:jit) to 50x
    // (ref) slower (Zen 5).
    bool staged = false;
  };
  struct Tile {
    size_t kind, src, wei, bias, dst;  // dst also locates the residual
    size_t chunk = 0;                  // of packed weights
  };
  // Packed weights: one chunk per (weight batch, column tile).
  struct Chunk {
    Box box;
    size_t kind, offset;
  };
  Operand src, wei, dst;
  bool packed = false;   // wei in the primitives' layout (chunks)
  bool compiled = true;  // each kind has its primitive (not Describe)
  bool has_bias = false;
  bool has_residual = false;
  int residual_index = 0;  // of the binary post-op
  std::vector<Kind> kinds;
  std::vector<Tile> tiles;  // column tile, then row tile, fastest last
  std::vector<Chunk> chunks;
  size_t packed_bytes = 0;
  // Per thread: the primitives' scratch, then a staged tile's dst.
  size_t primitive_scratch_bytes = 0, staged_bytes = 0;

  // Both throw dnnl::error; Make catches it.
  size_t KindFor(const Box& box, const Operand* bias, const PostOps& post_ops);
  // `chunk_of`: the chunk of each (batch, first column) so far.
  void AddTile(const Box& box, const Operand* bias, const PostOps& post_ops,
               std::map<std::pair<int64_t, int64_t>, size_t>& chunk_of);

  // One worker's argument list: a memory per argument of the kind it ran
  // last, created once and re-pointed tile by tile.
  struct Worker {
    const Kind* kind = nullptr;
    std::vector<memory> memories;
    std::vector<dnnl_exec_arg_t> args;
    void Run(const Impl& im, const Tile& tile, const Call& p, void* scratch);
  };
  // Copies a staged tile's dst to its place in `dst`, adding the residual.
  void CopyOut(const Kind& k, const Tile& tile, const Call& p,
               const void* staged) const;
};

MatMul::MatMul(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MatMul::MatMul(MatMul&&) noexcept = default;
MatMul& MatMul::operator=(MatMul&&) noexcept = default;
MatMul::~MatMul() = default;

// The primitive for tiles shaped like `box`, created on first use. Tiles of
// one column tile share a weights chunk, so later row counts take the
// layout the first one chose.
size_t MatMul::Impl::KindFor(const Box& box, const Operand* bias,
                             const PostOps& post_ops) {
  std::optional<memory::desc> wei_layout;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const Kind& kind = kinds[k];
    if (kind.cols != box.cols) continue;
    if (kind.rows == box.rows) return k;
    wei_layout = kind.pd.weights_desc();
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  Operand dst_cut = Cut(dst, box, kDstRole);
  // A column tile of a wider dst is strided; bf16 residuals stay binary.
  const bool staged = dst_cut.strides[0] != box.cols &&
                      (!post_ops.add_residual || dst.type == DataType::kF32);
  if (staged) dst_cut.strides = {};
  const memory::desc dst_md = ToDesc(dst_cut, false);
  dnnl::post_ops ops;
  if (post_ops.gelu_tanh) {
    ops.append_eltwise(1.f, dnnl::algorithm::eltwise_gelu_tanh, 0.f, 0.f);
  }
  if (post_ops.add_residual && !staged) {
    // A binary add reads the residual wherever it lives; a sum post-op
    // would need it copied into dst first.
    residual_index = ops.len();
    ops.append_binary(dnnl::algorithm::binary_add, dst_md);
  }
  attr.set_post_ops(ops);
  const Operand wei_cut = Cut(wei, box, kWeiRole);
  const memory::desc wei_md =
      wei_layout
          ? *wei_layout
          : ToDesc(packed ? Operand{wei_cut.dims, {}, wei.type} : wei_cut,
                   true);
  const memory::desc src_md = ToDesc(Cut(src, box, kSrcRole), false);
  const auto desc = bias ? dnnl::matmul::desc(
                               src_md, wei_md,
                               ToDesc(Cut(*bias, box, kWeiRole), false), dst_md)
                         : dnnl::matmul::desc(src_md, wei_md, dst_md);
  Kind kind{box.rows, box.cols, {}, {}, staged};
  kind.pd = dnnl::matmul::primitive_desc(desc, attr, CpuEngine());
  if (compiled) kind.prim = dnnl::matmul(kind.pd);
  primitive_scratch_bytes = std::max(
      primitive_scratch_bytes, AlignUp(kind.pd.scratchpad_desc().get_size()));
  if (staged) staged_bytes = std::max(staged_bytes, dst_md.get_size());
  kinds.push_back(std::move(kind));
  return kinds.size() - 1;
}

void MatMul::Impl::AddTile(
    const Box& box, const Operand* bias, const PostOps& post_ops,
    std::map<std::pair<int64_t, int64_t>, size_t>& chunk_of) {
  const size_t kind = KindFor(box, bias, post_ops);
  Tile tile{kind, OffsetOf(src, box, kSrcRole), OffsetOf(wei, box, kWeiRole),
            bias ? OffsetOf(*bias, box, kWeiRole) : 0,
            OffsetOf(dst, box, kDstRole)};
  if (packed) {
    // The chunk of this tile's weights: weights broadcast over dst's
    // batches are one chunk for all of them.
    Box chunk_box = box;
    chunk_box.m0 = 0;
    if (wei.dims.size() == 3 && wei.dims[0] == 1) chunk_box.b = 0;
    const auto [at, added] = chunk_of.emplace(
        std::make_pair(chunk_box.b, chunk_box.n0), chunks.size());
    if (added) {
      chunks.push_back({chunk_box, kind, packed_bytes});
      packed_bytes += AlignUp(kinds[kind].pd.weights_desc().get_size());
    }
    tile.chunk = at->second;
    tile.wei = chunks[tile.chunk].offset;
  }
  tiles.push_back(tile);
}

Result<MatMul> MatMul::Create(const Operand& src, const Operand& wei,
                              const Operand* bias, const Operand& dst,
                              Threading threading, const PostOps& post_ops) {
  return Make(src, wei, bias, dst, threading, post_ops, /*compile=*/true);
}

Result<MatMul> MatMul::Describe(const Operand& src, const Operand& wei,
                                const Operand* bias, const Operand& dst,
                                Threading threading, const PostOps& post_ops) {
  return Make(src, wei, bias, dst, threading, post_ops, /*compile=*/false);
}

Result<MatMul> MatMul::Make(const Operand& src, const Operand& wei,
                            const Operand* bias, const Operand& dst,
                            Threading threading, const PostOps& post_ops,
                            bool compile) {
  for (const Operand* op : {&src, &wei, bias, &dst}) {
    if (!op) continue;
    const bool sized = std::all_of(op->dims.begin(), op->dims.end(),
                                   [](int64_t d) { return d > 0; });
    if (op->dims.size() != dst.dims.size() || !sized ||
        (dst.dims.size() != 2 && dst.dims.size() != 3)) {
      return InvalidArgument(
          "matmul operands need rank 2 or 3 alike and "
          "every dim > 0");
    }
  }
  // Every primitive runs on one thread: create it for one, as oneDNN Graph
  // does.
  const ThreadScope single(1);
  const size_t rank = dst.dims.size();
  const int64_t B = rank == 3 ? dst.dims[0] : 1;
  const int64_t M = dst.dims[rank - 2], N = dst.dims[rank - 1];
  const bool split = threading == Threading::kTeam;
  // Narrow tiles start on multiples of 64 columns, where they can read a
  // full-width product's packed weights (ReadPackedWeightsOf).
  const Tiles cols = !split || M >= MatMulWideRows() ? Tiles::Of(N, N)
                     : M >= kMatMulRowTile
                         ? Tiles::Of(N, kMatMulColumnTile)
                         : Tiles::Blocks(N, kMatMulNarrowTile);
  const Tiles rows = Tiles::Of(
      M, split ? std::max(kMatMulMinRows, kMatMulTileWork / cols.size) : M);
  try {
    auto impl = std::make_unique<Impl>();
    impl->src = src;
    impl->wei = wei;
    impl->dst = dst;
    impl->packed = wei.strides.empty();
    impl->compiled = compile;
    impl->has_bias = bias != nullptr;
    impl->has_residual = post_ops.add_residual;
    std::map<std::pair<int64_t, int64_t>, size_t> chunk_of;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t nt = 0; nt < cols.count; ++nt) {
        for (int64_t mt = 0; mt < rows.count; ++mt) {
          const Box box{b, mt * rows.size, nt * cols.size, rows.SizeOf(mt),
                        cols.SizeOf(nt)};
          impl->AddTile(box, bias, post_ops, chunk_of);
        }
      }
    }
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
  return impl_->primitive_scratch_bytes + AlignUp(impl_->staged_bytes);
}

size_t MatMul::packed_weights_bytes() const { return impl_->packed_bytes; }

bool MatMul::SharesPackedWeights(const MatMul& other) const {
  const Impl& a = *impl_;
  const Impl& b = *other.impl_;
  if (!a.packed || !b.packed || a.chunks.size() != b.chunks.size()) {
    return false;
  }
  for (size_t i = 0; i < a.chunks.size(); ++i) {
    const Impl::Chunk& x = a.chunks[i];
    const Impl::Chunk& y = b.chunks[i];
    if (x.box.b != y.box.b || x.box.n0 != y.box.n0 ||
        x.box.cols != y.box.cols || x.offset != y.offset ||
        a.kinds[x.kind].pd.weights_desc() !=
            b.kinds[y.kind].pd.weights_desc()) {
      return false;
    }
  }
  return true;
}

bool MatMul::ReadPackedWeightsOf(const MatMul& other) {
  if (SharesPackedWeights(other)) return true;
  Impl& a = *impl_;
  const Impl& b = *other.impl_;
  if (!a.packed || !b.packed || a.wei.dims != b.wei.dims ||
      a.wei.type != b.wei.type) {
    return false;
  }
  std::vector<size_t> offsets;  // of a's chunks in b's copy
  for (const Impl::Chunk& x : a.chunks) {
    std::optional<size_t> at;
    for (const Impl::Chunk& y : b.chunks) {
      if (y.box.b != x.box.b || x.box.n0 < y.box.n0 ||
          x.box.n0 + x.box.cols > y.box.n0 + y.box.cols) {
        continue;
      }
      const std::optional<size_t> inside =
          ColumnsInside(b.kinds[y.kind].pd.weights_desc(),
                        a.kinds[x.kind].pd.weights_desc(), x.box.n0 - y.box.n0);
      if (inside) at = y.offset + *inside;
      break;
    }
    if (!at) return false;
    offsets.push_back(*at);
  }
  for (Impl::Tile& tile : a.tiles) tile.wei = offsets[tile.chunk];
  for (size_t i = 0; i < a.chunks.size(); ++i) a.chunks[i].offset = offsets[i];
  a.packed_bytes = b.packed_bytes;
  return true;
}

bool MatMul::PacksAsRowsLinear() const {
  const Impl& a = *impl_;
  if (!a.packed || a.wei.type != DataType::kBF16 || a.wei.dims.size() != 2 ||
      a.chunks.size() != 1 || a.chunks[0].offset != 0 ||
      a.chunks[0].box.cols != a.wei.dims[1]) {
    return false;
  }
  try {
    const memory::desc rows_linear({a.wei.dims[0], a.wei.dims[1]},
                                   memory::data_type::bf16,
                                   memory::format_tag::BA16a64b2a);
    return a.kinds[a.chunks[0].kind].pd.weights_desc() == rows_linear;
  } catch (const dnnl::error&) {
    return false;
  }
}

Status MatMul::PackWeights(const Operand& plain, const void* plain_data,
                           void* packed) const {
  try {
    const auto& engine = CpuEngine();
    dnnl::stream stream(engine);
    for (const Impl::Chunk& chunk : impl_->chunks) {
      memory from(ToDesc(Cut(plain, chunk.box, kWeiRole), false), engine,
                  const_cast<char*>(static_cast<const char*>(plain_data)) +
                      OffsetOf(plain, chunk.box, kWeiRole));
      memory to(impl_->kinds[chunk.kind].pd.weights_desc(), engine,
                static_cast<char*>(packed) + chunk.offset);
      dnnl::reorder(from, to).execute(stream, from, to);
    }
    stream.wait();
    return {};
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN could not pack weights: ") + e.what());
  }
}

void MatMul::Impl::Worker::Run(const Impl& im, const Tile& tile, const Call& p,
                               void* scratch) {
  const Kind& k = im.kinds[tile.kind];
  const auto at = [](const void* base, size_t offset) {
    return const_cast<char*>(static_cast<const char*>(base)) + offset;
  };
  struct Arg {
    int id;
    memory::desc desc;
    void* handle;
  };
  Arg wanted[6];
  int count = 0;
  wanted[count++] = {DNNL_ARG_SRC, k.pd.src_desc(), at(p.src, tile.src)};
  wanted[count++] = {DNNL_ARG_WEIGHTS, k.pd.weights_desc(),
                     at(p.wei, tile.wei)};
  void* staged = static_cast<char*>(scratch) + im.primitive_scratch_bytes;
  wanted[count++] = {DNNL_ARG_DST, k.pd.dst_desc(),
                     k.staged ? staged : at(p.dst, tile.dst)};
  wanted[count++] = {DNNL_ARG_SCRATCHPAD, k.pd.scratchpad_desc(), scratch};
  if (im.has_bias) {
    wanted[count++] = {DNNL_ARG_BIAS, k.pd.bias_desc(), at(p.bias, tile.bias)};
  }
  if (im.has_residual && !k.staged) {
    wanted[count++] = {
        DNNL_ARG_ATTR_MULTIPLE_POST_OP(im.residual_index) | DNNL_ARG_SRC_1,
        k.pd.dst_desc(), at(p.residual, tile.dst)};
  }
  const auto& engine = CpuEngine();
  if (kind != &k) {
    kind = &k;
    memories.clear();
    args.clear();
    for (int i = 0; i < count; ++i) {
      memories.emplace_back(wanted[i].desc, engine, wanted[i].handle);
      args.push_back({wanted[i].id, memories.back().get()});
    }
  } else {
    for (int i = 0; i < count; ++i) {
      memories[static_cast<size_t>(i)].set_data_handle(wanted[i].handle);
    }
  }
  thread_local dnnl::stream stream(engine);
  dnnl::error::wrap_c_api(
      dnnl_primitive_execute(k.prim.get(), stream.get(),
                             static_cast<int>(args.size()), args.data()),
      "could not execute a matmul");
  if (k.staged) im.CopyOut(k, tile, p, staged);
}

void MatMul::Impl::CopyOut(const Kind& k, const Tile& tile, const Call& p,
                           const void* staged) const {
  const size_t elem = SizeOf(dst.type);
  const auto row_bytes = static_cast<size_t>(k.cols) * elem;
  const auto stride = static_cast<size_t>(StridesOf(dst)[dst.dims.size() - 2]);
  const auto* from = static_cast<const char*>(staged);
  char* to = static_cast<char*>(p.dst) + tile.dst;
  for (int64_t r = 0; r < k.rows; ++r, from += row_bytes, to += stride * elem) {
    if (!has_residual) {
      std::memcpy(to, from, row_bytes);
      continue;
    }
    const auto* x = reinterpret_cast<const float*>(from);
    const auto* res =
        reinterpret_cast<const float*>(static_cast<const char*>(p.residual) +
                                       (to - static_cast<char*>(p.dst)));
    auto* y = reinterpret_cast<float*>(to);
    for (int64_t c = 0; c < k.cols; ++c) y[c] = x[c] + res[c];
  }
}

void MatMul::Run(const void* src, const void* wei, const void* bias, void* dst,
                 void* scratch, int num_threads, const void* residual) const {
  const Call call{src, wei, bias, dst, residual};
  RunMany(&call, 1, scratch, num_threads);
}

void MatMul::RunMany(const Call* calls, size_t count, void* scratch,
                     int num_threads) const {
  const Impl& im = *impl_;
  HWY_ASSERT(im.compiled);  // never a Described one
  const auto per_call = static_cast<int64_t>(im.tiles.size());
  const int64_t total = per_call * static_cast<int64_t>(count);
  const int workers =
      static_cast<int>(std::min<int64_t>(std::max(num_threads, 1), total));
  const auto run = [&](Impl::Worker& worker, int64_t t, void* own) {
    worker.Run(im, im.tiles[static_cast<size_t>(t % per_call)],
               calls[t / per_call], own);
  };
  if (workers <= 1) {
    const ThreadScope single(1);
    Impl::Worker worker;
    for (int64_t t = 0; t < total; ++t) run(worker, t, scratch);
    return;
  }
#pragma omp parallel num_threads(workers)
  {
    Impl::Worker worker;
    void* own = static_cast<char*>(scratch) +
                static_cast<size_t>(omp_get_thread_num()) * scratch_bytes();
    // nowait: the region's end is the one barrier, as with `parallel for`.
#pragma omp for schedule(static) nowait
    for (int64_t t = 0; t < total; ++t) run(worker, t, own);
  }
}

const char* MatMul::impl_name() const {
  return impl_->kinds.front().pd.impl_info_str();
}

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

int64_t MatMulLayoutRows(int64_t n) {
  // Full-width products of k0 = ceil(W / tile) row tiles have first tiles
  // of [ceil(W / k0), tile] rows, of k0 + 1 tiles [ceil((k0 tile + 1) / (k0
  // + 1)), tile], of more tiles fewer: every size has come by k0 tile rows,
  // or (k0 + 1) tile where k0 + 1 tiles reach lower.
  const int64_t tile = std::max(kMatMulMinRows, kMatMulTileWork / n);
  const int64_t wide = MatMulWideRows();
  const int64_t k0 = (wide + tile - 1) / tile;
  const bool lower = (k0 * tile + k0 + 1) / (k0 + 1) < (wide + k0 - 1) / k0;
  return (k0 + (lower ? 1 : 0)) * tile;
}

int64_t MatMulWideRows() {
  static const int64_t rows = [] {
    try {
      // Whether oneDNN packs a prompt's projection's weights in blocks.
      const memory::desc src({128, 768}, memory::data_type::f32,
                             memory::format_tag::ab);
      const memory::desc wei({768, 768}, memory::data_type::f32,
                             memory::format_tag::any);
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, src),
                                            attr, CpuEngine());
      const dnnl_memory_desc_t& packed = pd.weights_desc().data;
      const bool blocked = packed.format_kind == dnnl_blocked &&
                           packed.format_desc.blocking.inner_nblks > 0;
      return blocked ? kMatMulRowTile : 2 * kMatMulRowTile;
    } catch (const dnnl::error&) {
      return 2 * kMatMulRowTile;
    }
  }();
  return rows;
}

bool HasNativeBF16() {
  const auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 ||
         isa == dnnl::cpu_isa::avx512_core_amx;
}

}  // namespace attn::kernels
