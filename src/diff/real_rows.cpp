#include "diff/real_rows.h"

#include <cstring>

#include "base/dtype.h"

namespace tdiff {

std::int64_t RealRows::count() const {
  std::int64_t n = 0;
  for (bool r : real) n += r;
  return n;
}

std::int64_t real_rows_rate(const Stage& s, const ModelConfig& c) { return c.rate(s.layer_type); }

RealRows real_rows(const Shape& s, const Batch& b, std::int64_t rate) {
  RealRows m;
  const auto B = b.rows(), S = b.seq();
  const std::size_t rank = s.size();
  const std::int64_t numel = shape_numel(s);
  std::size_t lead = 0;  // dimensions that index rows
  bool tokens = true;
  if (rank >= 2 && s[0] == B && s[1] == S) lead = 2;
  else if (rank >= 1 && s[0] == B * S) lead = 1;
  else if (rank >= 2 && s[0] == B && rate > 0) lead = 2, tokens = false;
  if (lead == 0) {  // no row structure (a table): every element counts
    m.rows = 1;
    m.inner = s;
    m.row_size = numel;
    m.real = {true};
    return m;
  }
  m.inner.assign(s.begin() + static_cast<std::ptrdiff_t>(lead), s.end());
  m.rows = lead == 2 ? s[0] * s[1] : s[0];
  m.row_size = m.rows ? numel / m.rows : 0;
  m.real.resize(static_cast<std::size_t>(m.rows));
  for (std::int64_t r = 0; r < m.rows; ++r) {
    bool real;
    if (tokens) {
      real = b.mask.data<std::uint8_t>()[r] != 0;
    } else {
      const std::int64_t n = s[1], w = r % n;
      const auto row = static_cast<std::size_t>(r / n);
      const auto start = b.start[row], end = b.start[row] + b.length[row];
      real = w >= (start + rate - 1) / rate && w < end / rate;
    }
    m.real[static_cast<std::size_t>(r)] = real;
  }
  return m;
}

Tensor keep_real_rows(const Tensor& t, const RealRows& rows) {
  const std::int64_t n = rows.count();
  if (n == rows.rows) return t;
  Shape shape = {n};
  shape.insert(shape.end(), rows.inner.begin(), rows.inner.end());
  Tensor out(t.dtype(), shape);
  const std::size_t row_bytes = static_cast<std::size_t>(rows.row_size) * dtype_size(t.dtype());
  std::size_t o = 0;
  for (std::int64_t r = 0; r < rows.rows; ++r)
    if (rows.real[static_cast<std::size_t>(r)])
      std::memcpy(out.raw() + (o++) * row_bytes, t.raw() + static_cast<std::size_t>(r) * row_bytes, row_bytes);
  return out;
}

std::int64_t padding_tokens(const Batch& b) {
  std::int64_t n = 0;
  for (auto m : b.mask.span<const std::uint8_t>()) n += m == 0;
  return n;
}

}  // namespace tdiff
