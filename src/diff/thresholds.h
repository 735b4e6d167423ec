#pragma once
// Verdict policy: turns the statistics of metrics.h into PASS / WARN / FAIL. Kept apart
// from the statistics so that one set of numbers can be judged under several policies.
//
// Floating-point tensors (defaults from the correctness paper):
//   FAIL  new NaN/Inf (the candidate has one the reference lacks), cosine < cosine_fail (0.99),
//         max_abs >= max_abs_fail (1e-1), rel_l2 >= rel_l2_fail (off), and for logits
//         top-1 agreement < top1_fail (off) or kl_max >= kl_fail (off);
//         with a noise floor: rmse > floor_k (3) x the floor run's rmse + floor_atol (0)
//   WARN  max_abs >= max_abs_warn (1e-2), cosine < cosine_warn (off), rel_l2 >= rel_l2_warn (off),
//         kl_max >= kl_warn (off)
// The max_abs rules read max_abs_scaled = max |d| / max(1, rms(r), |r|) (metrics.h) while the
// switch max_abs_scaled is 1 (the default), and the plain max |d| when it is 0. Why: the
// paper's absolute 1e-1 assumes activations of order 1, but bf16 and fp16 round relative to
// the values; at |x| = 26 (a V4-Flash residual stream) one bf16 step is 0.125, and a collapse
// of such streams that lands near zero keeps their absolute error, so a correct bf16 path
// would FAIL on rounding alone. On tensors of order 1 (rms(r) <= 1) and where |r| <= 1 both
// rules are the same absolute bound.
// The tolerance rule (tolerance = 1, the default): a tensor with an expected error (the error
// its candidate's formats explain, diff/expected.h) is judged by the ratio of its error to it,
//   ratio = max(rel_l2 / E.rel, err_rel / E.elem)
//   FAIL  ratio > expected_fail (8: three mantissa bits beyond what the formats explain)
//   WARN  ratio > expected_warn (4: two bits)
// and the max_abs rules judge only tensors without one (a compare of two dumps). tolerance = 0
// gives back the max_abs rules everywhere (`--thresholds paper`: with max_abs_scaled = 0, the
// paper's absolute bounds).
// Integer and boolean tensors (selection indices, masks) are compared exactly. Their
// mismatch share is the share of differing tokens for routing tensors (ties excluded, see
// metrics.h) and of differing elements otherwise:
//   FAIL  mismatch share > mismatch_fail (0.01);  WARN  mismatch share > mismatch_warn (0)
// Routing tensors of a run that replayed the selections FAIL on their unexplained share
// instead (RoutingMetrics::judged_share): explained flips changed nothing downstream.
// "off" values are the ones that can never trigger (cosine -1, the others +inf).
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "diff/metrics.h"
#include "diff/systematic.h"

namespace tdiff {

struct TokenSteps;

enum class Verdict : std::uint8_t { pass, warn, fail };  // ordered by severity
const char* verdict_name(Verdict v);                     // "PASS", "WARN", "FAIL"
inline Verdict worst(Verdict a, Verdict b) { return a > b ? a : b; }

struct Thresholds {
  double cosine_fail = 0.99;
  double cosine_warn = -1.0;
  double max_abs_fail = 1e-1;
  double max_abs_warn = 1e-2;
  double max_abs_scaled = 1.0;      // a switch: 1 judge max_abs_scaled, 0 the plain max_abs
  double rel_l2_fail, rel_l2_warn;  // +inf (set in the constructor)
  double top1_fail = 0.0;
  double kl_fail, kl_warn;          // +inf
  double mismatch_fail = 0.01;
  double mismatch_warn = 0.0;
  double floor_k = 3.0;
  double floor_atol = 0.0;
  double tolerance = 1.0;      // a switch: 1 judge against the expected error where known, 0 never
  double expected_warn = 4.0;  // ratio to the expected error
  double expected_fail = 8.0;
  double measured_warn = 2.0;  // ratio to the measured floor (flash-attention's tests use 2)
  double measured_fail = 4.0;
  // Systematic errors (diff/systematic.h): FAIL when a slice's score (in standard errors, against
  // its own noise and its family's spread) is above this; 0 turns the rule off.
  double systematic = 10.0;
  Thresholds();
};

// Sets one field by its name (the names above); InputError for an unknown name, NaN, or a
// switch (max_abs_scaled, tolerance) set to anything but 0 or 1.
void set_threshold(Thresholds& t, std::string_view key, double value);
std::vector<std::string> threshold_keys();

// Overrides for the stages (or "stage/tensor" keys) matching any of `patterns` (fnmatch
// globs such as "L0[2-4].attn.*"). Later rules win over earlier ones.
struct ThresholdRule {
  std::vector<std::string> patterns;
  std::vector<std::pair<std::string, double>> values;
  std::string origin;  // "file.toml rule 2", "--rule" ..., for error messages
};

struct ThresholdPolicy {
  Thresholds defaults;
  std::vector<ThresholdRule> rules;

  Thresholds for_tensor(const std::string& stage, const std::string& tensor) const;
  // InputError when a rule's pattern matches none of `stages` (a typo would silently do nothing).
  void check_patterns(const std::vector<std::string>& stages) const;
};

// Thresholds file (TOML):
//   [default]                     # optional: changes the defaults for every stage
//   max_abs_warn = 5e-3
//   [[rule]]                      # any number, applied in order
//   stages = "L0[2-4].attn.*"     # a glob or a list of globs
//   cosine_fail = 0.999
// Unknown keys, wrong types and parse errors are InputErrors naming the file.
// A name instead of a path picks a built-in set: `precision` (the defaults: the tolerance rule),
// `scaled` (max_abs_scaled rules everywhere, tolerance 0) or `paper` (the correctness paper's
// absolute bounds: tolerance 0, max_abs_scaled 0).
ThresholdPolicy load_thresholds(const std::string& path);
std::optional<ThresholdPolicy> named_thresholds(const std::string& name);
// Command-line overrides, appended as the last rules: "PATTERN:key=value[,key=value...]",
// or "key=value[,...]" for every stage (a rule for "*", so it wins over the file's rules).
void add_threshold_override(ThresholdPolicy& p, const std::string& spec);

bool stage_matches(const std::string& pattern, const std::string& stage, const std::string& tensor = "");

// The number the max_abs_fail / max_abs_warn rules compare: max_abs_scaled or max_abs.
double judged_max_abs(const TensorMetrics& m, const Thresholds& t);

// The error a candidate's formats explain for one tensor (diff/expected.h computes it).
struct ExpectedError {
  double rel = 0.0;        // E: the relative error |d| / |r| (rms) the formats explain
  double elem = 0.0;       // E sqrt(2 ln n): the largest element's err_rel among n
  double local = 0.0;      // the stage's own rounding and accumulation, relative
  double inherited = 0.0;  // its inputs' relative errors, in quadrature
  std::int64_t n_acc = 0;  // the accumulation length the local part counts
  std::string format;      // where the output is rounded ("bf16", "f32 stream", ...)
  std::string source;      // "formats" (a candidate stage) or "reference" (float64, mixed runs)
  // The reference's conditioning (diff/conditioned_error.h), where the case stores it: G, by which
  // `rel`'s inherited part was amplified; the element ratio the rows' gains give, the gain of the
  // row that reached it and its element (elem is the expected err_rel there). NaN / -1: none.
  double gain_l2 = 1.0;
  double elem_ratio = std::numeric_limits<double>::quiet_NaN();
  double gain_at = 1.0;
  std::int64_t elem_at = -1;
  bool conditioned() const { return !std::isnan(elem_ratio); }
};
// max(rel_l2 / E.rel, err_rel / E.elem): how many times the explained error the tensor carries.
double expected_ratio(const TensorMetrics& m, const ExpectedError& e);

// The measured floor (flash-attention's test rule): tdiff's emu in the candidate's own storage
// and stream formats with every other knob correct, run on the same inputs and judged against
// the same reference (exec/measured_floor.h). With one, a tolerance verdict needs both rules:
// the error beyond the a-priori limit (expected_warn / expected_fail) and beyond
// measured_warn / measured_fail times what the floor itself carries.
struct MeasuredFloor {
  double rel_l2 = 0.0, err_rel = 0.0;
  std::string label;  // the floor's policy, e.g. "fp32 + *:storage=bf16 + *:stream=fp32 + *:matmul_input=bf16"
};
// max(rel_l2 / floor rel_l2, err_rel / floor err_rel), each floor no lower than the stage's own
// a-priori rounding (a bit-exact floor would make every difference infinite).
double measured_ratio(const TensorMetrics& m, const MeasuredFloor& f, const ExpectedError& e);

// The verdict of one tensor, with a short reason naming the rules that fired; for a tolerance
// verdict, which rule decided it ("a priori", or "measured floor" where the floor lowered it)
// and the ratio to the floor (NaN without one).
struct Judgement {
  Verdict verdict = Verdict::pass;
  std::string reason;
  std::string decided_by;
  double floor_ratio = std::numeric_limits<double>::quiet_NaN();
};
struct JudgeInput {
  const TensorMetrics* metrics = nullptr;
  const LogitsMetrics* logits = nullptr;     // logits tensors
  const RoutingMetrics* routing = nullptr;   // selection tensors
  bool exact = false;                        // integer/boolean tensors
  const TensorMetrics* floor = nullptr;      // the noise-floor run's metrics, if any
  const ExpectedError* expected = nullptr;   // the error the candidate's formats explain, if known
  const MeasuredFloor* measured = nullptr;   // the measured floor, if run
  const SystematicFit* systematic = nullptr; // per-slice fits, where the tensor's layout is known
  const TokenSteps* tokens = nullptr;        // a generation's token verdicts, classified (token_verdicts.h)
};
Judgement judge_tensor(const JudgeInput& in, const Thresholds& t);

}  // namespace tdiff
