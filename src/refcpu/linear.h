#pragma once
// Dense products of the reference, float64.
//   linear:  x [N, in], W [out, in]  ->  y [N, out] = x · Wᵀ
//   grouped: x [N, G·c], W [G·R, c]   ->  y [N, G·R], y[:, gR:(g+1)R] = x[:, gc:(g+1)c] · W[gR:(g+1)R]ᵀ
// Every product is cut into the same blocks: kRowChunk rows of x (kExpertRowChunk for the
// routed experts; a short chunk padded with zero rows) times kColTile rows of W, one
// single-threaded BLAS call (DGEMM) each, and OpenMP across blocks. A block's shape depends
// only on `in`, `out` and the operator, never on the thread count, the number of rows or a
// row's position, and a BLAS call of one shape sums each output in one fixed order, so a
// row's result depends only on that row and W: the same bits for any thread count and any
// padding or tokens-per-expert count. (OpenBLAS picks another kernel for small M·N·K, so the
// row count of a call must be fixed, not merely the tile.) A routed expert's block is summed
// over `in` in fixed pieces (expert_pieces), one call each, accumulating into the block, so
// that each piece of W is converted just before its call and is still in cache for it.
#include <cstdint>
#include <functional>
#include <vector>

namespace tdiff::refcpu {

// Sizes measured with OpenBLAS on one AVX-512 core at K = 4096 (DGEMM 52 GFLOP/s): 128 x 256
// blocks 43 GFLOP/s, 64 x 256 38. Experts see few tokens each (24 on average at 1024 tokens
// and 256 experts), where 32-row chunks waste the least: 33 GFLOP/s a block, 64 rows would
// mostly multiply padding. Converted whole, a tile of an expert (256 x 4096, 8 MB) reaches its
// calls from memory (31 GFLOP/s at 32 rows); a 256 x 384 piece converted just before its calls
// is still in L2 (41-44), and only the stored bf16/FP4 bytes cross the memory bus.
inline constexpr std::int64_t kRowChunk = 128;
inline constexpr std::int64_t kExpertRowChunk = 32;
inline constexpr std::int64_t kColTile = 256;

// Writes rows [r0, r1) of a weight matrix W [out, in] as float64 to dst ([r1 - r0, in]).
// Streamed products call it once per column tile, from several threads at once.
using WeightRows = std::function<void(std::int64_t r0, std::int64_t r1, double* dst)>;

void linear(const double* x, std::int64_t rows, std::int64_t in, const double* w, std::int64_t out, double* y);
// linear() of the rows of x each scaled by f[row] first, y = (f ⊙ x) · Wᵀ, bit-identical to
// linear() on the scaled rows: the scaled rows are made one row chunk at a time, into a buffer
// each thread keeps between calls, never all at once (the hyper-connection mix scales 16384
// wide streams: 134 MB at 1024 tokens, whose allocation and first touch cost more than its product).
void linear_scaled_rows(const double* x, const double* f, std::int64_t rows, std::int64_t in, const double* w,
                        std::int64_t out, double* y);
// The same product with W converted one tile at a time (each thread holds one tile), for
// weights too large to hold in float64 (the lm_head at real widths: 4.2 GB). Bit-identical
// to linear() on the converted W.
void linear_streamed(const double* x, std::int64_t rows, std::int64_t in, const WeightRows& w, std::int64_t out,
                     double* y);
// The pieces [k0, k1) a routed expert's product sums `in` in: those OpenBLAS's level-3 driver
// cuts K into with the SkylakeX/Cooperlake DGEMM kernels (GEMM_Q 384, unroll 16: 384 each, the
// remainder of 384 to 768 halved), so with those kernels the bits are those of one call over
// the whole of `in`; other kernels still sum each piece in one fixed order.
std::vector<std::int64_t> expert_pieces(std::int64_t in);
// Writes columns [k0, k1) of a tile's rows of W as float64 to dst ([width, k1 - k0]); asked
// for the pieces in column order.
using TileColumns = std::function<void(std::int64_t k0, std::int64_t k1, double* dst)>;
// One column tile of a routed expert's product, serial: y[:, 0:width) (stride ldy) = x [rows,
// in] · W_tileᵀ, W_tile [width <= kColTile, in], rows a multiple of kExpertRowChunk (the
// caller pads x with zero rows; their outputs are written and meaningless). Each piece of
// W_tile is converted into `piece` (a scratch buffer of the calling thread), then multiplied
// by every row chunk while it is still in L2. The caller spreads
// (expert, tile) pairs over threads.
void expert_tile_product(const double* x, std::int64_t rows, std::int64_t in, const TileColumns& w,
                         std::int64_t width, double* y, std::int64_t ldy, std::vector<double>& piece);
void grouped_linear(const double* x, std::int64_t rows, std::int64_t groups, std::int64_t in_per_group,
                    const double* w, std::int64_t out_per_group, double* y);

// The OpenBLAS kernel set in use ("Cooperlake", "Haswell", ...), for environment records:
// the last bits of the reference are that kernel's.
const char* blas_core();

// C [M, N] (stride ldc) = A [M, K] (stride lda) · Bᵀ, B [N, K] (stride ldb) when b_transposed,
// else · B, B [K, N]: one DGEMM on the calling thread, for per-token products whose shape
// depends only on that token (attention over its visible keys, the indexer's scores).
void gemm_serial(std::int64_t M, std::int64_t N, std::int64_t K, const double* a, std::int64_t lda, const double* b,
                 std::int64_t ldb, bool b_transposed, double* c, std::int64_t ldc);

}  // namespace tdiff::refcpu
