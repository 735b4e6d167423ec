#include "exec/generation_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace tdiff {

namespace {

// Bytes of one [i, j, ...] row of a tensor of rank >= 2 (everything after dimension 1).
std::size_t row_bytes(const Tensor& t) {
  std::int64_t n = 1;
  for (int k = 2; k < t.rank(); ++k) n *= t.dim(k);
  return static_cast<std::size_t>(n) * dtype_size(t.dtype());
}

}  // namespace

Tensor rows_of_dim1(const Tensor& t, std::int64_t r0, std::int64_t r1) {
  Shape shape = t.shape();
  const std::int64_t R = shape.at(1);
  if (r0 < 0 || r1 > R || r0 > r1) throw std::logic_error(fmt::format("rows [{}, {}) of {} rows", r0, r1, R));
  shape[1] = r1 - r0;
  Tensor out(t.dtype(), shape);
  const std::size_t rb = row_bytes(t);
  for (std::int64_t b = 0; b < shape[0]; ++b)
    if (r1 > r0)
      std::memcpy(out.raw() + static_cast<std::size_t>(b * (r1 - r0)) * rb,
                  t.raw() + static_cast<std::size_t>(b * R + r0) * rb, static_cast<std::size_t>(r1 - r0) * rb);
  return out;
}

Tensor concat_dim1(const Tensor& a, const Tensor& b) {
  if (!a.defined() || a.dim(1) == 0) return b.clone();
  if (!b.defined() || b.dim(1) == 0) return a.clone();
  Shape shape = a.shape();
  const std::int64_t Ra = a.dim(1), Rb = b.dim(1);
  shape[1] = Ra + Rb;
  Tensor out(a.dtype(), shape);
  const std::size_t rb = row_bytes(a);
  if (rb != row_bytes(b) || a.dtype() != b.dtype() || a.dim(0) != b.dim(0))
    throw std::logic_error(fmt::format("concat of {} and {}", shape_str(a.shape()), shape_str(b.shape())));
  for (std::int64_t r = 0; r < shape[0]; ++r) {
    std::byte* dst = out.raw() + static_cast<std::size_t>(r * (Ra + Rb)) * rb;
    std::memcpy(dst, a.raw() + static_cast<std::size_t>(r * Ra) * rb, static_cast<std::size_t>(Ra) * rb);
    std::memcpy(dst + static_cast<std::size_t>(Ra) * rb, b.raw() + static_cast<std::size_t>(r * Rb) * rb,
                static_cast<std::size_t>(Rb) * rb);
  }
  return out;
}

GenerationCache::GenerationCache(std::int64_t rows, std::int64_t window)
    : B_(rows), W_(window), slot_pos_(static_cast<std::size_t>(window), -1) {}

void GenerationCache::begin_step(std::int64_t begin, std::int64_t end, bool decode) {
  begin_ = begin;
  end_ = end;
  decode_ = decode;
  key_pos_.clear();
  if (decode) {  // the token's row is written first: the ring after it
    key_pos_ = slot_pos_;
    key_pos_[static_cast<std::size_t>(begin % W_)] = begin;
    return;
  }
  if (begin > 0) key_pos_ = slot_pos_;  // a later chunk: the ring as it was, then the chunk
  for (std::int64_t p = begin; p < end; ++p) key_pos_.push_back(p);
}

void GenerationCache::end_step() {
  for (std::int64_t p = begin_; p < end_; ++p) slot_pos_[static_cast<std::size_t>(p % W_)] = p;
  for (auto& [name, c] : compressors_) c.entries_at_step = c.entries.defined() ? c.entries.dim(1) : 0;
}

Tensor GenerationCache::window_visibility() const {
  const auto T = end_ - begin_, K = static_cast<std::int64_t>(key_pos_.size());
  Tensor vis(DType::boolean, {B_, T, K});
  auto* v = vis.data<std::uint8_t>();
  for (std::int64_t b = 0; b < B_; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t k = 0; k < K; ++k) {
        const std::int64_t q = begin_ + t, kp = key_pos_[static_cast<std::size_t>(k)];
        v[(b * T + t) * K + k] = kp >= 0 && q - W_ < kp && kp <= q;
      }
  return vis;
}

Tensor GenerationCache::window_keys(int layer, const Tensor& new_rows) {
  const auto T = end_ - begin_;
  if (new_rows.dim(0) != B_ || new_rows.dim(1) != T)
    throw std::logic_error(fmt::format("window keys: rows {} for a step of {}", shape_str(new_rows.shape()), T));
  auto it = rings_.find(layer);
  if (it == rings_.end()) {
    Shape shape = new_rows.shape();
    shape[1] = W_;
    Tensor ring(new_rows.dtype(), shape);
    std::memset(ring.raw(), 0, ring.nbytes());
    it = rings_.emplace(layer, std::move(ring)).first;
  }
  Tensor& ring = it->second;
  const std::size_t rb = row_bytes(new_rows);
  auto write = [&] {
    for (std::int64_t b = 0; b < B_; ++b)
      for (std::int64_t t = 0; t < T; ++t)
        std::memcpy(ring.raw() + static_cast<std::size_t>(b * W_ + (begin_ + t) % W_) * rb,
                    new_rows.raw() + static_cast<std::size_t>(b * T + t) * rb, rb);
  };
  if (decode_) {
    write();
    return ring.clone();
  }
  Tensor keys = begin_ > 0 ? concat_dim1(ring, new_rows) : new_rows.clone();
  write();
  return keys;
}

GenerationCache::Compressor& GenerationCache::compressor(const std::string& pool) { return compressors_[pool]; }

GenerationCache::PoolSpan GenerationCache::pool_span(const std::string& pool, const Tensor& P, const Tensor& Z) {
  Compressor& c = compressor(pool);
  c.span_P = concat_dim1(c.P, P);
  c.span_Z = concat_dim1(c.Z, Z);
  return {c.span_P, c.span_Z, c.rows_begin, c.entries_at_step};
}

Tensor GenerationCache::pooled(const std::string& pool, std::int64_t rate, bool overlap, const Tensor& span_entries) {
  Compressor& c = compressor(pool);
  const std::int64_t span_first = c.rows_begin / rate, after = span_first + span_entries.dim(1);
  Tensor fresh = rows_of_dim1(span_entries, c.entries_at_step - span_first, span_entries.dim(1));
  // Keep the open window, and on CSA the last finished window too (its A half pools into the
  // next entry).
  const std::int64_t keep_from = overlap ? std::max<std::int64_t>(0, (after - 1) * rate) : after * rate;
  const std::int64_t span_rows = c.span_P.dim(1);
  c.P = rows_of_dim1(c.span_P, keep_from - c.rows_begin, span_rows);
  c.Z = rows_of_dim1(c.span_Z, keep_from - c.rows_begin, span_rows);
  c.rows_begin = keep_from;
  c.span_P = c.span_Z = Tensor();
  return fresh;
}

std::int64_t GenerationCache::entries_before(const std::string& pool) const {
  const auto it = compressors_.find(pool);
  return it == compressors_.end() ? 0 : it->second.entries_at_step;
}

const Tensor& GenerationCache::add_entries(const std::string& pool, const Tensor& rotated) {
  Compressor& c = compressor(pool);
  c.entries = concat_dim1(c.entries, rotated);
  return c.entries;
}

const Tensor& GenerationCache::entries(const std::string& pool) const { return compressors_.at(pool).entries; }

}  // namespace tdiff
