#pragma once
// Element types and exact conversions between them.
// All float encoders round to nearest, ties to even, from a double, so that a value is
// rounded once (double -> f32 -> f16 would round twice). Subnormals, inf and NaN are kept.
// f8_e4m3 is the OCP "fn" variant: bias 7, no infinities, S.1111.111 is NaN, max 448;
// values that round above 448 become NaN (what torch's float8_e4m3fn cast does).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tdiff {

enum class DType : std::uint8_t { f64, f32, f16, bf16, f8_e4m3, i64, i32, u8, boolean };

std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);  // "f64", "f32", "f16", "bf16", "f8_e4m3", ...
std::optional<DType> parse_dtype(std::string_view name);
bool is_float(DType t);

std::uint16_t f16_bits(double x);
double f16_value(std::uint16_t bits);
std::uint16_t bf16_bits(double x);
double bf16_value(std::uint16_t bits);
std::uint8_t f8e4m3_bits(double x);
double f8e4m3_value(std::uint8_t bits);

// The value x takes once stored in a float dtype t (f64 returns x unchanged).
double round_to(double x, DType t);

}  // namespace tdiff
