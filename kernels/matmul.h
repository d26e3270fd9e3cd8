// dst = src x wei (+ bias) backed by oneDNN matmul primitives: created once,
// executed many times. Kernels talk to oneDNN only through this class and
// Convert (matmul.cc is the one kernel source with oneDNN headers).
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

// How a MatMul's work is spread over threads.
enum class Threading {
  // Run is called by one worker inside an OpenMP region; one primitive.
  kWorker,
  // Run is called outside any parallel region and hands fixed tiles of dst
  // to the team. The tiles depend on the shape only and each is one
  // single-threaded primitive that reduces over all of K, so every bit of
  // the result is the same for every team size (oneDNN's own threading may
  // split K by the team size, and so change the sums' order).
  kTeam,
};

// Tiles of Threading::kTeam, each of one batch. From MatMulWideRows() rows
// on, a tile spans every column: its dst rows are dense (oneDNN 2.6 runs a
// strided dst on gemm:jit, not brgemm), and its weights are one chunk laid
// out as for kMatMulPackedRows rows, so the run reads the model's packed
// copy. Fewer rows are cut into columns, so that they still spread over
// threads: as evenly as kMatMulColumnTile allows, or below kMatMulRowTile
// rows into kMatMulNarrowTile columns (the last one shorter), which read
// the full-width packed copy in place where it is laid out in column
// blocks (MatMul::ReadPackedWeightsOf). A tile has about kMatMulTileWork
// dst elements: kMatMulTileWork / its columns rows, or kMatMulMinRows if
// more, evened out over the row tiles.
constexpr int64_t kMatMulRowTile = 128;
constexpr int64_t kMatMulColumnTile = 256;
constexpr int64_t kMatMulNarrowTile = 64;
constexpr int64_t kMatMulTileWork = kMatMulRowTile * kMatMulColumnTile;
constexpr int64_t kMatMulMinRows = 64;
// kMatMulRowTile where oneDNN packs weights in column blocks (brgemm,
// AVX-512): there a 128-token prompt's full-width tiles run on the model's
// packed copy, where its 256-column tiles ran on the plain weights, 5% and
// 17% slower at 1 and 2 threads (GPT-2 124M, Zen 4). Else 256: AVX2's
// gemm:jit runs a full-width tile of 64 rows at half the speed of a
// 128 x 256 one, its weights no longer in cache.
int64_t MatMulWideRows();
// The row counts whose kTeam products of `n` columns lay out their packed
// weights in every way any row count does: 1 to this. From MatMulWideRows()
// rows on, tiles span the full width, M rows in row tiles whose first
// (ceil(M / ceil(M / tile)) rows) lays out the weights, and every such size
// has come by then.
int64_t MatMulLayoutRows(int64_t n);
// The row count whose weight packing a model keeps for all its runs: every
// kTeam product of at least MatMulWideRows() rows and 8 or more columns has
// full-width tiles, and so this packed layout (MatMul::SharesPackedWeights
// tells for sure).
constexpr int64_t kMatMulPackedRows = 4096;

class MatMul {
 public:
  // Operands are of rank 2 ([M, K] x [K, N] -> [M, N]) or 3 (a batch of
  // those; batch dims of 1 broadcast). `bias`, if given, broadcasts over dims
  // of size 1. Creating may JIT code.
  static Result<MatMul> Create(const Operand& src, const Operand& wei,
                               const Operand* bias, const Operand& dst,
                               Threading threading,
                               const PostOps& post_ops = {});
  // The tiles and packed weight layout Create would make, without compiling
  // its kernels: for the questions about layouts below, PackWeights and
  // scratch_bytes, never Run (a plan of each row count asked this way costs
  // microseconds, not a JIT).
  static Result<MatMul> Describe(const Operand& src, const Operand& wei,
                                 const Operand* bias, const Operand& dst,
                                 Threading threading,
                                 const PostOps& post_ops = {});

  MatMul(MatMul&&) noexcept;
  MatMul& operator=(MatMul&&) noexcept;
  ~MatMul();

  // Bytes of scratch one thread of Run needs; Run takes num_threads of
  // them, back to back, one set per concurrent caller.
  size_t scratch_bytes() const;
  // Bytes of the weights in the primitives' own layout.
  size_t packed_weights_bytes() const;
  // Reorders weights laid out as `plain` into the primitives' layout.
  Status PackWeights(const Operand& plain, const void* plain_data,
                     void* packed) const;
  // True when `other` lays out packed weights exactly as this does (the
  // same chunks in the same layouts), so that one packed copy serves both:
  // the layout depends on the tiles, so on the row count.
  bool SharesPackedWeights(const MatMul& other) const;
  // For a product of the same weights (dims and type as `other`'s): makes
  // Run read them from `other`'s packed copy when each of its chunks lies
  // inside one of other's byte for byte (the same blocked
  // layout, starting a whole number of column blocks in: the 64-column
  // tiles of a short product inside a long one's full-width chunk), or when
  // SharesPackedWeights. Returns false, changing nothing, otherwise.
  bool ReadPackedWeightsOf(const MatMul& other);
  // Whether the packed bf16 weights W^T [K, N] of this product of rank 2
  // are one chunk laid out as RowsLinear's bf16 items of W [N, K]
  // (oneDNN's BA16a64b2a, kernels/rows_linear.h), so that steps of a few
  // rows read them in place.
  bool PacksAsRowsLinear() const;
  // dst = src x wei (+ bias, post-ops) on num_threads threads (1 for
  // Threading::kWorker). Pointers must match the operands given to Create;
  // `wei` is in the packed layout when Create was asked for one.
  // Thread-safe when each concurrent caller passes its own `scratch`.
  // `residual` is read only with PostOps::add_residual.
  void Run(const void* src, const void* wei, const void* bias, void* dst,
           void* scratch, int num_threads,
           const void* residual = nullptr) const;

  // The operands of one product in RunMany.
  struct Call {
    const void* src = nullptr;
    const void* wei = nullptr;
    const void* bias = nullptr;
    void* dst = nullptr;
    const void* residual = nullptr;  // read only with PostOps::add_residual
  };
  // Runs `count` independent products of this shape (e.g. one per
  // sequence) as Run would, their tiles spread over the team in one
  // parallel region rather than one region per product. Same results as
  // `count` Runs.
  void RunMany(const Call* calls, size_t count, void* scratch,
               int num_threads) const;

  // oneDNN's name for the implementation it chose, e.g. "brg:avx512_core".
  const char* impl_name() const;

 private:
  struct Impl;
  explicit MatMul(std::unique_ptr<Impl> impl);
  static Result<MatMul> Make(const Operand& src, const Operand& wei,
                             const Operand* bias, const Operand& dst,
                             Threading threading, const PostOps& post_ops,
                             bool compile);
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
