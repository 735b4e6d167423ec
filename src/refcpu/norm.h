#pragma once
// RMS normalisations of the reference (model-spec §3.1, 3.2), float64, fixed summation order.
//   rms_norm:      x [N, n], g [n] -> y = g ⊙ (x · 1/sqrt(mean(x²) + ε))
//   rms_unweighted: x [N, n]        -> y = x · 1/sqrt(mean(x²) + ε)   (per row; heads are rows)
#include <cstdint>

namespace tdiff::refcpu {

// 1/sqrt(mean(x²) + eps) over n values, summed in index order.
double inv_rms(const double* x, std::int64_t n, double eps);
void rms_norm(const double* x, std::int64_t rows, std::int64_t n, const double* g, double eps, double* y);
void rms_unweighted(const double* x, std::int64_t rows, std::int64_t n, double eps, double* y);

}  // namespace tdiff::refcpu
