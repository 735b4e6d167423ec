#include "base/dtype.h"

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

namespace tdiff {
namespace {

// A binary float format with 1 sign bit, `exp_bits` exponent bits and `man_bits` mantissa
// bits. IEEE-like formats reserve the top exponent for inf/NaN; e4m3fn does not (only the
// all-ones pattern is NaN), which `ieee_top` tells apart.
struct SmallFloat {
  int exp_bits;
  int man_bits;
  bool ieee_top;

  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  std::uint32_t nan_bits() const {
    return ieee_top ? ((1u << (exp_bits + man_bits)) - 1) & ~((1u << (man_bits - 1)) - 1)
                    : (1u << (exp_bits + man_bits)) - 1;
  }
  double max_finite() const {
    int max_exp = ieee_top ? (1 << exp_bits) - 2 : (1 << exp_bits) - 1;
    double max_man = ieee_top ? 2.0 - std::ldexp(1.0, -man_bits)
                              : 2.0 - std::ldexp(2.0, -man_bits);  // top mantissa is NaN
    return std::ldexp(max_man, max_exp - bias());
  }

  double decode(std::uint32_t bits) const {
    const std::uint32_t sign = bits >> (exp_bits + man_bits) & 1u;
    const std::uint32_t e = bits >> man_bits & ((1u << exp_bits) - 1);
    const std::uint32_t m = bits & ((1u << man_bits) - 1);
    double v;
    const std::uint32_t e_max = (1u << exp_bits) - 1;
    if (ieee_top && e == e_max) {
      v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
    } else if (!ieee_top && e == e_max && m == (1u << man_bits) - 1) {
      v = std::numeric_limits<double>::quiet_NaN();
    } else if (e == 0) {
      v = std::ldexp(static_cast<double>(m), 1 - bias() - man_bits);
    } else {
      v = std::ldexp(static_cast<double>(m + (1u << man_bits)), static_cast<int>(e) - bias() - man_bits);
    }
    return sign ? -v : v;
  }

  std::uint32_t encode(double x) const {
    const std::uint32_t sign_bit = 1u << (exp_bits + man_bits);
    if (std::isnan(x)) return nan_bits() | (std::signbit(x) ? sign_bit : 0u);
    const std::uint32_t sign = std::signbit(x) ? sign_bit : 0u;
    double a = std::fabs(x);
    if (std::isinf(a)) return ieee_top ? sign | (((1u << exp_bits) - 1) << man_bits) : sign | nan_bits();
    if (a == 0.0) return sign;
    // Quantum (spacing) of the format at a's binade, bounded below by the subnormal spacing.
    int e;
    std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
    int unbiased = e - 1;
    const int min_normal_exp = 1 - bias();
    if (unbiased < min_normal_exp) unbiased = min_normal_exp;
    const double quantum = std::ldexp(1.0, unbiased - man_bits);
    // a / quantum is exact (power-of-two scaling); nearbyint rounds half to even in the
    // default rounding mode.
    double q = std::nearbyint(a / quantum) * quantum;
    if (q > max_finite()) {
      if (ieee_top) {
        // IEEE overflow: round to inf unless below the midpoint to the next power.
        return sign | (((1u << exp_bits) - 1) << man_bits);
      }
      return sign | nan_bits();
    }
    if (q == 0.0) return sign;
    int qe;
    double qf = std::frexp(q, &qe);
    int biased = qe - 1 + bias();
    if (biased <= 0) {  // subnormal
      auto m = static_cast<std::uint32_t>(std::ldexp(q, bias() - 1 + man_bits));
      return sign | m;
    }
    auto m = static_cast<std::uint32_t>(std::ldexp(qf * 2.0 - 1.0, man_bits));
    return sign | (static_cast<std::uint32_t>(biased) << man_bits) | m;
  }
};

constexpr SmallFloat kF16{5, 10, true};
constexpr SmallFloat kBF16{8, 7, true};
constexpr SmallFloat kF8E4M3{4, 3, false};

std::vector<double> decode_table(const SmallFloat& f) {
  std::vector<double> t(std::size_t{1} << 16);
  for (std::uint32_t b = 0; b < t.size(); ++b) t[b] = f.decode(b);
  return t;
}

}  // namespace

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::f8_e4m3: case DType::u8: case DType::boolean: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f8_e4m3: return "f8_e4m3";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view n) {
  for (DType t : {DType::f64, DType::f32, DType::f16, DType::bf16, DType::f8_e4m3, DType::i64,
                  DType::i32, DType::u8, DType::boolean})
    if (dtype_name(t) == n) return t;
  return std::nullopt;
}

bool is_float(DType t) {
  return t == DType::f64 || t == DType::f32 || t == DType::f16 || t == DType::bf16 ||
         t == DType::f8_e4m3;
}

std::uint16_t f16_bits(double x) { return static_cast<std::uint16_t>(kF16.encode(x)); }
// 16-bit values through a table of every pattern's decoded value (built once): the diff
// engine and refcpu widen whole captured tensors of them.
double f16_value(std::uint16_t b) {
  static const auto table = decode_table(kF16);
  return table[b];
}
std::uint16_t bf16_bits(double x) { return static_cast<std::uint16_t>(kBF16.encode(x)); }
double bf16_value(std::uint16_t b) {
  static const auto table = decode_table(kBF16);
  return table[b];
}
std::uint8_t f8e4m3_bits(double x) { return static_cast<std::uint8_t>(kF8E4M3.encode(x)); }
double f8e4m3_value(std::uint8_t b) { return kF8E4M3.decode(b); }

double round_to(double x, DType t) {
  switch (t) {
    case DType::f32: return static_cast<double>(static_cast<float>(x));
    case DType::f16: return f16_value(f16_bits(x));
    case DType::bf16: return bf16_value(bf16_bits(x));
    case DType::f8_e4m3: return f8e4m3_value(f8e4m3_bits(x));
    default: return x;
  }
}

}  // namespace tdiff
