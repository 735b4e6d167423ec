#pragma once
// The tdiff tap for C++ engines (tap.h has the C interface and the rules): a dump that is
// committed when close() is called and discarded if the Tap is destroyed before that (an
// exception unwinding through the engine leaves no dump). Errors throw std::runtime_error.
//
//   tdiff::Tap tap("dump.h5");
//   tap.on_case("case.h5");
//   tap.attr("engine", "my-engine 0.3");
//   tap.write("L03.attn.core/o", host_values, {1, 128, 4096});        // float, double, int32/64
//   tap.write_raw("L03.attn.core/o", "bf16", bits, {1, 128, 4096});   // 16-bit patterns
//   tap.close();
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "tap/tap.h"

namespace tdiff {

class Tap {
 public:
  explicit Tap(const std::string& path, const std::string& mode = "run") : tap_(tdiff_tap_open(path.c_str(), mode.c_str())) {
    if (!tap_) throw std::runtime_error(tdiff_tap_error());
  }
  // The dump a tdiff request asks for (tap.h: tdiff_tap_open_request; "" reads $TDIFF_REQUEST).
  static Tap from_request(const std::string& request = "") {
    tdiff_tap* t = tdiff_tap_open_request(request.empty() ? nullptr : request.c_str());
    if (!t) throw std::runtime_error(tdiff_tap_error());
    return Tap(t);
  }
  Tap(Tap&& o) noexcept : tap_(o.tap_) { o.tap_ = nullptr; }
  ~Tap() {
    if (tap_) tdiff_tap_discard(tap_);
  }
  Tap(const Tap&) = delete;
  Tap& operator=(const Tap&) = delete;

  void attr(const std::string& key, const std::string& value) { check(tdiff_tap_attr(tap_, key.c_str(), value.c_str())); }
  // The case the dump is written on (tap.h: tdiff_tap_case).
  void on_case(const std::string& case_path) { check(tdiff_tap_case(tap_, case_path.c_str())); }
  // The case's reference tensor into `out` of that shape, as `dtype` (tap.h: tdiff_tap_reference).
  void reference_raw(const std::string& name, const std::string& dtype, void* out, const std::vector<std::int64_t>& shape) {
    check(tdiff_tap_reference(tap_, name.c_str(), dtype.c_str(), shape.data(), static_cast<int>(shape.size()), out));
  }

  template <class T>
  void write(const std::string& name, const T* data, const std::vector<std::int64_t>& shape) {
    write_raw(name, dtype_name<T>(), data, shape);
  }
  // The vector must hold exactly the shape's elements: more in the shape would be read past its end.
  template <class T>
  void write(const std::string& name, const std::vector<T>& data, const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) {
      if (d < 0 || (d > 0 && n > INT64_MAX / d))
        return write(name, data.data(), shape);  // the C call names the shape's fault
      n *= d;
    }
    if (n != static_cast<std::int64_t>(data.size()))
      throw std::runtime_error("tdiff tap: " + name + ": the shape holds " + std::to_string(n) +
                               " elements, the vector " + std::to_string(data.size()));
    write(name, data.data(), shape);
  }
  void write_raw(const std::string& name, const std::string& dtype, const void* data, const std::vector<std::int64_t>& shape) {
    check(tdiff_tap_write(tap_, name.c_str(), dtype.c_str(), shape.data(), static_cast<int>(shape.size()), data));
  }

  // Whether the request takes stage `name`'s output from the reference: then `out` holds it.
  bool substitute_raw(const std::string& name, const std::string& dtype, void* out, const std::vector<std::int64_t>& shape) {
    const int rc = tdiff_tap_substitute(tap_, name.c_str(), dtype.c_str(), shape.data(), static_cast<int>(shape.size()), out);
    check(rc < 0 ? rc : 0);
    return rc == 1;
  }

  void close() {
    tdiff_tap* t = tap_;
    tap_ = nullptr;
    check(tdiff_tap_close(t));
  }

 private:
  template <class T> static const char* dtype_name() {
    if constexpr (std::is_same_v<T, double>) return "f64";
    else if constexpr (std::is_same_v<T, float>) return "f32";
    else if constexpr (std::is_same_v<T, std::int64_t>) return "i64";
    else if constexpr (std::is_same_v<T, std::int32_t>) return "i32";
    else if constexpr (std::is_same_v<T, std::uint8_t>) return "u8";
    else if constexpr (std::is_same_v<T, bool>) return "bool";
    else static_assert(!sizeof(T), "tdiff::Tap::write: use write_raw for f16/bf16 bit patterns");
  }
  static void check(int rc) {
    if (rc != 0) throw std::runtime_error(tdiff_tap_error());
  }
  explicit Tap(tdiff_tap* t) : tap_(t) {}
  tdiff_tap* tap_;
};

}  // namespace tdiff
