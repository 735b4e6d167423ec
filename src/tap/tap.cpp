// The tdiff tap (tap.h): tensors under stage names into a candidate dump, through the same
// HDF5 writer, and so the same storage rules, as tdiff's own files (casefile/h5_writer.h).
#include "tap/tap.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <fmt/format.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/tensor.h"
#include "casefile/case_file.h"
#include "casefile/engine_request.h"
#include "casefile/h5io.h"
#include "casefile/reference_store.h"
#include "casefile/stored_tensor.h"
#include "model/stage_graph.h"
#include "model/tensor_contract.h"

struct tdiff_tap {
  std::string path;
  std::unique_ptr<tdiff::H5Writer> writer;
  std::set<std::string> names;
  bool failed = false;  // after an error the dump is incomplete: nothing more is written
  // The case it is written on (tdiff_tap_case), read through its tensor contract.
  std::optional<tdiff::H5File> case_file;
  std::shared_ptr<const tdiff::TensorContract> contract;
  // A boundaries reference (golden --store boundaries): the stages it lacks recomputed on read.
  std::shared_ptr<tdiff::ReferenceStore> boundaries;
  // A request's (tdiff_tap_open_request): the stages taken from the reference.
  std::set<std::string> substitute;
};

namespace {

thread_local std::string last_error;

// Dump names: "<stage>/<tensor>", each part of letters, digits, '.', '_' and '-' (what the
// stage list uses), so no name can escape the dump's layout or collide with an attribute.
void check_name(const std::string& name) {
  const auto slash = name.find('/');
  auto part_ok = [](const std::string& s) {
    if (s.empty()) return false;
    for (unsigned char ch : s)
      if (!std::isalnum(ch) && ch != '.' && ch != '_' && ch != '-') return false;
    return true;
  };
  if (slash == std::string::npos || !part_ok(name.substr(0, slash)) || !part_ok(name.substr(slash + 1)))
    tdiff::input_error("'{}' is not a tensor name of the form <stage>/<tensor> (e.g. L03.attn.core/o)", name);
}

tdiff::DType parsed_dtype(const char* dtype) {
  const auto dt = tdiff::parse_dtype(dtype ? dtype : "");
  if (!dt) tdiff::input_error("dtype '{}' is not one of f64, f32, f16, bf16, f8_e4m3, i64, i32, u8, bool", dtype ? dtype : "(null)");
  return *dt;
}

tdiff::Shape checked_shape(const int64_t* shape, int ndim) {
  if (ndim < 0 || ndim > tdiff::kMaxRank || (ndim > 0 && !shape))
    tdiff::input_error("a rank of {} (0 to {} allowed)", ndim, tdiff::kMaxRank);
  tdiff::Shape s(shape, shape + ndim);
  for (auto d : s)
    if (d < 0) tdiff::input_error("a negative dimension in shape {}", tdiff::shape_str(s));
  return s;
}

tdiff::Tensor copy_tensor(const char* dtype, const int64_t* shape, int ndim, const void* data) {
  const auto dt = parsed_dtype(dtype);
  const tdiff::Shape s = checked_shape(shape, ndim);
  // The byte count is computed here, before anything is allocated: [2^32, 2^32] wrapped to 0
  // elements in 64 bits and was written as an empty tensor.
  const bool empty = std::find(s.begin(), s.end(), 0) != s.end();
  std::int64_t bytes = static_cast<std::int64_t>(tdiff::dtype_size(dt));
  for (auto d : s)
    if (!empty && __builtin_mul_overflow(bytes, d, &bytes))
      tdiff::input_error("shape {} of {} holds more than 2^63 bytes", tdiff::shape_str(s), dtype);
  tdiff::Tensor t(dt, s);
  if (t.nbytes() && !data) tdiff::input_error("no data for a tensor of shape {}", tdiff::shape_str(s));
  if (t.nbytes()) std::memcpy(t.raw(), data, t.nbytes());
  return t;
}

int null_tap(const char* what) {
  last_error = fmt::format("tdiff tap: {} on a null tap (did tdiff_tap_open fail?)", what);
  return -1;
}

// Runs `f`, turning any error into -1 and tdiff_tap_error()'s message; `tap` (if given) is
// marked failed.
template <class F>
int guarded(tdiff_tap* tap, const char* what, F&& f) {
  try {
    if (tap && tap->failed) tdiff::input_error("an earlier error: the dump is incomplete");
    f();
    last_error.clear();
    return 0;
  } catch (const std::exception& e) {
    last_error = fmt::format("tdiff tap{}{}: {}: {}", tap ? " " : "", tap ? tap->path : "", what, e.what());
    if (tap) tap->failed = true;
    return -1;
  }
}

}  // namespace

extern "C" {

tdiff_tap* tdiff_tap_open(const char* path, const char* mode) {
  auto tap = std::make_unique<tdiff_tap>();
  const int rc = guarded(nullptr, "open", [&] {
    if (!path || !*path) tdiff::input_error("no path");
    const std::string m = mode ? mode : "";
    if (m != "run" && m != "replay" && m != "isolated")
      tdiff::input_error("mode '{}' is not 'run', 'replay' or 'isolated'", m);
    tap->path = path;
    tap->writer = std::make_unique<tdiff::H5Writer>(tap->path);
    tap->writer->set_attr("/", "tdiff_dump", "candidate");
    tap->writer->set_attr("/", "tdiff_dump_mode", m);
  });
  return rc == 0 ? tap.release() : nullptr;
}

int tdiff_tap_attr(tdiff_tap* tap, const char* key, const char* value) {
  if (!tap) return null_tap("attr");
  return guarded(tap, "attr", [&] {
    const std::string k = key ? key : "";
    if (k.empty() || k.rfind("tdiff_", 0) == 0) tdiff::input_error("attribute name '{}' (empty or reserved)", k);
    tap->writer->set_attr("/", "env." + k, value ? value : "");
  });
}

tdiff_tap* tdiff_tap_open_request(const char* request) {
  const char* path = request ? request : std::getenv(tdiff::kEngineRequestEnv);
  tdiff::EngineRequest r;
  const int rc = guarded(nullptr, "open request", [&] {
    if (!path || !*path) tdiff::input_error("no request file (${} is not set)", tdiff::kEngineRequestEnv);
    r = tdiff::read_engine_request(path);
  });
  if (rc != 0) return nullptr;
  tdiff_tap* tap = tdiff_tap_open(r.dump_path.c_str(), r.mode.c_str());
  if (!tap) return nullptr;
  if (tdiff_tap_case(tap, r.case_path.c_str()) != 0) {
    tdiff_tap_discard(tap);
    return nullptr;
  }
  tap->substitute.insert(r.substitute.begin(), r.substitute.end());
  return tap;
}

int tdiff_tap_substitute(tdiff_tap* tap, const char* name, const char* dtype, const int64_t* shape, int ndim, void* out) {
  if (!tap) return null_tap("substitute");
  const std::string n = name ? name : "";
  const auto slash = n.find('/');
  if (!tap->substitute.count(n.substr(0, slash))) return 0;
  return tdiff_tap_reference(tap, name, dtype, shape, ndim, out) == 0 ? 1 : -1;
}

int tdiff_tap_case(tdiff_tap* tap, const char* case_path) {
  if (!tap) return null_tap("case");
  return guarded(tap, "case", [&] {
    if (!case_path || !*case_path) tdiff::input_error("no case path");
    if (tap->case_file) tdiff::input_error("the case is given once");
    const std::string path = std::filesystem::absolute(case_path).lexically_normal().string();
    tap->case_file.emplace(path);
    const tdiff::CaseInfo info = tdiff::read_case(*tap->case_file);
    tap->contract = std::make_shared<const tdiff::TensorContract>(tdiff::build_stages(info.config), info.config,
                                                                  info.batch.rows(), info.batch.seq());
    tap->boundaries = tdiff::boundaries_reference(*tap->case_file, "/reference", tap->contract);
    tap->writer->set_attr("/", "case", path);
    tap->writer->set_attr("/", "case_inputs_sha256", tdiff::inputs_sha256(info.batch));
  });
}

int tdiff_tap_reference(tdiff_tap* tap, const char* name, const char* dtype, const int64_t* shape, int ndim, void* out) {
  if (!tap) return null_tap("reference");
  const std::string n = name ? name : "";
  return guarded(tap, n.empty() ? "reference" : n.c_str(), [&] {
    if (!tap->case_file) tdiff::input_error("no case: call tdiff_tap_case first");
    check_name(n);
    const tdiff::DType dt = parsed_dtype(dtype);
    const tdiff::Shape s = checked_shape(shape, ndim);
    const auto slash = n.find('/');
    const tdiff::Tensor ref =
        tap->boundaries && slash != std::string::npos
            ? tap->boundaries->get(n.substr(0, slash), n.substr(slash + 1))
            : tdiff::read_stage_tensor(*tap->case_file, "/reference", n, *tap->contract, tdiff::StoredBy::reference);
    if (!ref.defined()) tdiff::input_error("{} holds no reference of it (run `tdiff golden`)", tap->case_file->path());
    if (tdiff::squeezed(ref.shape()) != tdiff::squeezed(s))
      tdiff::input_error("the buffer is {}, the reference {}", tdiff::shape_str(s), tdiff::shape_str(ref.shape()));
    const tdiff::Tensor t = ref.to(dt);
    if (t.nbytes() && !out) tdiff::input_error("no buffer for a tensor of shape {}", tdiff::shape_str(s));
    if (t.nbytes()) std::memcpy(out, t.raw(), t.nbytes());
  });
}

int tdiff_tap_write(tdiff_tap* tap, const char* name, const char* dtype, const int64_t* shape, int ndim, const void* data) {
  if (!tap) return null_tap("write");
  const std::string n = name ? name : "";
  return guarded(tap, n.empty() ? "write" : n.c_str(), [&] {
    check_name(n);
    if (!tap->names.insert(n).second) tdiff::input_error("written twice");
    tdiff::Tensor t = copy_tensor(dtype, shape, ndim, data);
    // With its case, each stage output is checked against the case's tensor contract now, where
    // the engine can say where it came from, not when tdiff reads the dump (a capture's helper
    // tensors under a stage's name are not stage outputs: written as they are).
    if (tap->contract)
      if (const tdiff::TensorSpec* spec = tap->contract->find(n)) {
        tdiff::TensorContract::check_layout(*spec, t.dtype(), t.shape(), tdiff::StoredBy::dump, tap->path, "/" + n);
        tdiff::TensorContract::check_values(*spec, t, tap->path, "/" + n);
      }
    tap->writer->write("/" + n, t);
  });
}

int tdiff_tap_close(tdiff_tap* tap) {
  if (!tap) return null_tap("close");
  std::unique_ptr<tdiff_tap> owned(tap);
  if (tap->failed) {
    last_error = fmt::format("tdiff tap {}: not written: an earlier write failed", tap->path);
    return -1;
  }
  return guarded(tap, "close", [&] { tap->writer->commit(); });
}

void tdiff_tap_discard(tdiff_tap* tap) { delete tap; }  // ~H5Writer removes the temporary file

const char* tdiff_tap_error(void) { return last_error.c_str(); }

}  // extern "C"
