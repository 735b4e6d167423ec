#pragma once
// The candidate's numerics policy (docs/design/design.md §4): per stage, what the kernels store,
// accumulate and compare in. A policy is a preset plus ordered overrides for stage patterns;
// the same knobs mean the same thing in the emu backend and in the HIP kernels.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "base/dtype.h"
#include "numerics/all_reduce.h"
#include "model/config.h"
#include "model/stage_graph.h"

namespace tdiff {

enum class MaskStyle : std::uint8_t { neg_inf, additive };     // −∞ vs finfo(storage).min added
enum class RescaleOrder : std::uint8_t { deferred, per_block };  // FA2: divide once; FA1: renormalise every block
enum class TieBreak : std::uint8_t { index, unstable };          // lowest index vs run-dependent order
enum class Reduction : std::uint8_t { fixed, atomic };           // fixed-order vs run-dependent order
enum class RopeAngle : std::uint8_t { f32, bf16, f16, fast };     // angle p·ω and sin/cos precision

// Every knob resolved for one stage.
struct Numerics {
  DType storage = DType::bf16;       // activations between stages (kernel outputs)
  DType stream = DType::f32;         // the residual (hyper-connection) streams X
  DType matmul_input = DType::bf16;  // GEMM operands; f8_e4m3 = 128x128 block-scaled weights, 1x128 activations
  DType matmul_accum = DType::f32;   // GEMM accumulator (fp16 = the grouped-GEMM bug class)
  DType qk_accum = DType::f32;       // attention QKᵀ dot products
  DType pv_accum = DType::f32;       // attention P·V accumulation
  DType softmax_stats = DType::f32;  // online-softmax running max and sum
  MaskStyle mask_style = MaskStyle::neg_inf;
  RescaleOrder rescale_order = RescaleOrder::deferred;
  DType router = DType::f32;         // router GEMM operands and its logits/scores (fp32: an SGEMM)
  DType topk_compare = DType::f32;   // router / indexer top-k comparison type
  TieBreak topk_ties = TieBreak::index;
  Reduction reduction = Reduction::fixed;
  DType logits = DType::f32;         // lm_head accumulation and output
  DType norm_stats = DType::f32;     // RMSNorm sum of squares and factor
  RopeAngle rope_angle = RopeAngle::f32;
  DType sinkhorn = DType::f32;       // hyper-connection maps and Sinkhorn iterations
  bool hc_eps = true;                // false: ε_hc flushed to zero
  DType pool_softmax = DType::f32;   // compressor / indexer gate softmax
  DType index_score = DType::f32;    // indexer dot products and head sum
  bool routing_bias_in_weights = false;  // the routing bias leaks into the weights
  bool routing_norm_eps = true;      // false: weight normalisation without +1e−20
  bool shared_clip = true;           // false: shared expert without SwiGLU clipping

  bool operator==(const Numerics&) const = default;
};

// One knob, one row: its name, the Numerics field it sets, its values (the text and the typed
// value each one sets), the operator kinds it changes, and its known-bad ("naive") and
// known-good ("fixed") settings — the fault catalog is this table, and setting, reading,
// presets and validation are loops over it.
using KnobValue = std::variant<DType, MaskStyle, RescaleOrder, TieBreak, Reduction, RopeAngle, bool>;
using KnobMember = std::variant<DType Numerics::*, MaskStyle Numerics::*, RescaleOrder Numerics::*, TieBreak Numerics::*,
                                Reduction Numerics::*, RopeAngle Numerics::*, bool Numerics::*>;
struct KnobInfo {
  KnobInfo() = default;
  template <class T>
  KnobInfo(std::string name, T Numerics::*field, std::vector<std::pair<std::string, T>> choices,
           std::vector<OpKind> kinds, std::string bad, std::string good, bool in_naive, std::string effect)
      : name(std::move(name)), member(field), kinds(std::move(kinds)), bad(std::move(bad)), good(std::move(good)),
        in_naive(in_naive), effect(std::move(effect)) {
    for (auto& [text, value] : choices) {
      values.push_back(std::move(text));
      typed.emplace_back(value);
    }
  }
  std::string name;
  KnobMember member;                // the Numerics field the knob sets
  std::vector<std::string> values;  // its value texts ...
  std::vector<KnobValue> typed;     // ... and what each one sets the field to (typed[i] for values[i])
  std::vector<OpKind> kinds;
  std::string bad, good;
  bool in_naive = false;  // the naive preset takes the bad setting (a straight port's habit)
  std::string effect;     // what the bad setting does numerically
  double paper_factor = 0;  // the error factor bad / good the method's source measured (0: none)
};
const std::vector<KnobInfo>& knob_catalog();
const KnobInfo& knob_info(const std::string& name);  // InputError for an unknown knob

// One knob set to one of its values, parsed once from text (a catalog row and a value index).
struct KnobSetting {
  const KnobInfo* knob;
  std::size_t value;
};
// Parses "fp16", "bf16", "additive", ... (aliases: f32, f16, f8_e4m3, true, false); InputError
// for an unknown knob or a value the knob does not take.
KnobSetting parse_knob(const std::string& knob, const std::string& value);
void apply_knob(Numerics& n, const KnobSetting& s);
void set_knob(Numerics& n, const std::string& knob, const std::string& value);  // parse + apply
std::string get_knob(const Numerics& n, const std::string& knob);

Numerics preset_numerics(const std::string& preset);  // naive | fixed | fp32

// How the candidate is split across devices (docs/design/tensor-parallel.md): run-wide
// settings, not per stage, since every rank runs the whole stage list. Set with --tp, --ep,
// --allreduce, --moe-reduce, --channels or `--set tp=4`; tp = ep = 1 is the unsplit model.
struct Split {
  int tp = 1;        // tensor-parallel ranks: attn.o_b and the MoE down projections split their K
  int ep = 1;        // expert-parallel ranks: experts whole, combined in owning-rank order
  AllReduce allreduce = AllReduce::ring;                // the order the all-reduce adds the ranks' partials
  MoeReduce moe_reduce = MoeReduce::sum_then_reduce;    // SGLang: routed + shared per rank, one all-reduce
  int channels = 1;  // collective channels: each cuts its own ring chunks (ring only)
  bool active() const { return tp > 1 || ep > 1; }
  // "tp=4 ep=1 allreduce=ring moe_reduce=sum_then_reduce channels=1".
  std::string describe() const;
  bool operator==(const Split&) const = default;
};
// Whether `key` is one of the split's settings (tp, ep, allreduce, moe_reduce, channels).
bool is_split_setting(const std::string& key);
// Sets one split setting from text; InputError naming the setting and the values it takes.
void set_split(Split& split, const std::string& key, const std::string& value);
std::string allreduce_name(AllReduce a);
std::string moe_reduce_name(MoeReduce m);
// InputError when the model cannot be split so: tp must divide the heads and the output
// groups (vLLM asserts both), the row-parallel K and the experts' width; ep the experts.
void check_split(const Split& split, const ModelConfig& c);

struct PolicyOverride {
  std::string stages;  // pattern (model/pattern.h)
  std::vector<std::pair<std::string, std::string>> knobs;
  std::string source;  // where it was written, for errors: "--set '...'" or the policy file
};

class Policy {
 public:
  static Policy preset(const std::string& name);
  // A preset name, or a .toml / .json policy file: preset = "...", [global] knobs,
  // [[override]] tables with `stages` and knobs.
  static Policy load(const std::string& name_or_file);
  // "PATTERN:knob=value" or "knob=value" (every stage); "tp=4" and the split's other
  // settings (run-wide only, no pattern).
  void add_set(const std::string& spec);
  const Split& split() const { return split_; }
  void set_split_setting(const std::string& key, const std::string& value) { set_split(split_, key, value); }
  void add_override(PolicyOverride o);
  // InputError when an override pattern matches no stage of the model, or when one of its
  // knobs applies to none of the stages it matches (no stage of the knob's operator kinds:
  // it would change nothing). A pattern matching some stages of those kinds is fine.
  void validate(const std::vector<Stage>& stages) const;
  // The stage's knobs: the base, then every override whose pattern matches, in order. Worked
  // out once per stage name and remembered (backends resolve every stage of every run).
  Numerics resolve(const std::string& stage) const;
  const std::string& name() const { return name_; }
  // A one-line description: "fixed + L02.attn.core:softmax_stats=fp16"; a split adds its
  // settings: "fixed + tp=4 + ep=1 + allreduce=ring + moe_reduce=sum_then_reduce + channels=1".
  std::string describe() const;
  // Every knob value the policy runs with on these stages: `knobs` every knob of the preset,
  // the file's global knobs and the overrides that match every stage ("storage=bf16 stream=fp32
  // ..."); `stages` one line per stage whose own knobs differ from those, naming only the knobs
  // of its operator kind that differ ("L02.attn.core: softmax_stats=fp16").
  struct Expanded {
    std::string knobs;
    std::vector<std::string> stages;
  };
  Expanded expand(const std::vector<Stage>& stages) const;

 private:
  // An override parsed once, when it is added: resolve() applies typed settings.
  struct TypedOverride {
    std::string stages;
    std::vector<KnobSetting> settings;
    std::string source;
  };
  // resolve()'s answers by stage name. Copies of a policy share them until one of the copies
  // changes (add_override gives it a fresh table), so a backend's copy keeps what an
  // earlier copy worked out; resolve() may run on several threads.
  struct Resolved {
    std::mutex mutex;
    std::unordered_map<std::string, Numerics> by_stage;
  };
  Numerics match_overrides(const std::string& stage) const;

  std::string name_ = "fixed";
  Numerics base_;
  std::vector<TypedOverride> overrides_;
  std::string described_;  // " + stages:knob=value" per setting, as written
  Split split_;
  std::shared_ptr<Resolved> resolved_ = std::make_shared<Resolved>();
};

}  // namespace tdiff
