#include "numerics/policy.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "model/config.h"
#include "base/error.h"
#include "model/pattern.h"

namespace tdiff {

namespace {

using K = OpKind;
// GEMMs whose operand and accumulator types follow matmul_input / matmul_accum (the router and
// lm_head have their own knobs, router and logits); split-K reductions happen in all of them.
const std::vector<OpKind> kGemmKinds = op_kinds_where([](const OpInfo& op) { return op.gemm; });
const std::vector<OpKind> kReductionKinds = op_kinds_where([](const OpInfo& op) { return op.split_k; });

std::vector<OpKind> all_compute_kinds() { return op_kinds_where([](const OpInfo& op) { return op.compute(); }); }

constexpr auto F32 = DType::f32, BF = DType::bf16, F16 = DType::f16, F8 = DType::f8_e4m3;

// A float-type knob's values, written fp32 / bf16 / fp16 / fp8.
std::vector<std::pair<std::string, DType>> types(std::initializer_list<DType> allowed) {
  std::vector<std::pair<std::string, DType>> v;
  for (DType t : allowed) v.emplace_back(t == F32 ? "fp32" : t == BF ? "bf16" : t == F16 ? "fp16" : "fp8", t);
  return v;
}
std::vector<std::pair<std::string, bool>> on_off() { return {{"on", true}, {"off", false}}; }

// The error factors (bad setting / fixed) that the FlashAttention-on-MI250 port the method
// came from measured; the audit prints its own beside them. Its other fixes have no number.
std::vector<KnobInfo> with_paper_factors(std::vector<KnobInfo> catalog) {
  const std::pair<const char*, double> paper[] = {{"qk_accum", 10}, {"softmax_stats", 5}, {"pv_accum", 8}, {"logits", 3}};
  for (const auto& entry : paper)  // (not a structured binding: clang 14 cannot capture one)
    std::find_if(catalog.begin(), catalog.end(), [&](const KnobInfo& k) { return k.name == entry.first; })->paper_factor =
        entry.second;
  return catalog;
}

// Other spellings a value is accepted under (the dtype names; true/false for a switch).
std::string canonical_value(const std::string& v) {
  if (v == "f32") return "fp32";
  if (v == "f16") return "fp16";
  if (v == "f8_e4m3") return "fp8";
  if (v == "true") return "on";
  if (v == "false") return "off";
  return v;
}

}  // namespace

const std::vector<KnobInfo>& knob_catalog() {
  // Kinds: the operator kinds whose emu arithmetic reads the knob (a knob changes nothing
  // elsewhere). `tdiff info --knobs` prints this table and the README carries it
  // (CliRun.ReadmeFaultCatalogMatchesInfoKnobs keeps the two equal).
  static const std::vector<KnobInfo> catalog = with_paper_factors({
      {"storage", &Numerics::storage, types({F32, BF, F16}),
       all_compute_kinds(), "fp16", "bf16", true,
       "activations rounded to 16 bits between kernels; fp16 keeps 3 more mantissa bits than bf16 but overflows to "
       "inf above 65504 and, in gfx90a's fp16 MFMA, flushes operands below 2^-14 to zero"},
      {"stream", &Numerics::stream, types({F32, BF, F16}),
       {K::hc_expand, K::hc_mix, K::hc_pre, K::hc_post, K::hc_head}, "fp16", "fp32", true,
       "the residual (hyper-connection) streams and their collapses (the inputs of attn_norm, ffn_norm and "
       "final.norm) stored in 16 bits: every layer's two expands round them again, and fp16 streams overflow "
       "where checkpoints carry massive activations"},
      {"matmul_input", &Numerics::matmul_input, types({F32, BF, F16, F8}),
       kGemmKinds, "fp16", "bf16", true,
       "GEMM operands rounded (fp8: e4m3 with power-of-two block scales as the release checkpoint); fp16 operands "
       "overflow above 65504 and gfx90a's fp16 MFMA flushes those below 2^-14 to zero"},
      {"matmul_accum", &Numerics::matmul_accum, types({F32, BF, F16}),
       kGemmKinds, "fp16", "fp32", true,
       "dot products accumulated in fp16: the error grows with the reduction length (4096 terms in V4-Flash)"},
      {"qk_accum", &Numerics::qk_accum, types({F32, F16}),
       {K::attention}, "fp16", "fp32", true,
       "attention logits q.k accumulated in fp16"},
      {"pv_accum", &Numerics::pv_accum, types({F32, F16}),
       {K::attention}, "fp16", "fp32", true,
       "attention output P.V accumulated in fp16"},
      {"softmax_stats", &Numerics::softmax_stats, types({F32, F16}),
       {K::attention}, "fp16", "fp32", true,
       "online-softmax logits, running max and sum kept in fp16"},
      {"mask_style", &Numerics::mask_style, {{"neg_inf", MaskStyle::neg_inf}, {"additive", MaskStyle::additive}},
       {K::attention}, "additive", "neg_inf", true,
       "masked keys biased by finfo(storage).min and visited instead of skipped: with the sink every row stays "
       "finite, so finite keys give the same numbers, but masked blocks are read and 0 x (non-finite) is NaN"},
      {"rescale_order", &Numerics::rescale_order, {{"deferred", RescaleOrder::deferred}, {"per_block", RescaleOrder::per_block}},
       {K::attention}, "per_block", "deferred", true,
       "online softmax renormalises the stored output after every KV block (FA1 style), rounding it to the storage "
       "type each time"},
      {"router", &Numerics::router, types({F32, BF, F16}),
       {K::router}, "bf16", "fp32", true,
       "the router's score GEMM in 16 bits (operands and logits; scores rounded): near-ties flip expert choices and "
       "exact ties appear (in a real ROCm deployment it changed routing between identical runs)"},
      {"topk_compare", &Numerics::topk_compare, types({F32, BF, F16}),
       {K::moe_select, K::idx_topk}, "bf16", "fp32", true,
       "router/indexer scores compared after rounding: near-ties become exact ties and flip choices"},
      {"topk_ties", &Numerics::topk_ties, {{"index", TieBreak::index}, {"unstable", TieBreak::unstable}},
       {K::moe_select, K::idx_topk}, "unstable", "index", true,
       "exact ties broken in a run-dependent order (memory order of a parallel sort): selections change between "
       "identical runs"},
      {"reduction", &Numerics::reduction, {{"fixed", Reduction::fixed}, {"atomic", Reduction::atomic}},
       kReductionKinds, "atomic", "fixed", true,
       "split-K partials and expert contributions atomically added into the output in its own format, in a "
       "run-dependent order: results differ between runs"},
      {"logits", &Numerics::logits, types({F32, BF, F16}),
       {K::lm_head}, "fp16", "fp32", true,
       "lm_head with fp16 operands, accumulation and logits (bf16: bf16 operands, fp32 accumulation, bf16 logits; "
       "fixed: an fp32 GEMM, as DeepSeek's inference computes its logits)"},
      {"norm_stats", &Numerics::norm_stats, types({F32, BF, F16}),
       {K::rms_norm, K::head_rms_norm, K::hc_mix, K::hc_head}, "fp16", "fp32", true,
       "RMSNorm sum of squares and factor in fp16: overflows past 65504 (a channel above 256 suffices), the factor "
       "becomes 0 and the row is zeroed"},
      {"rope_angle", &Numerics::rope_angle, {{"fp32", RopeAngle::f32}, {"bf16", RopeAngle::bf16}, {"fp16", RopeAngle::f16}, {"fast", RopeAngle::fast}},
       {K::rope_table, K::entry_rope}, "fp16", "fp32", true,
       "RoPE angle p.w rounded to 16 bits (or fast-math sin/cos): the phase is lost as positions grow"},
      {"sinkhorn", &Numerics::sinkhorn, types({F32, BF, F16}),
       {K::hc_mix, K::hc_sinkhorn, K::hc_head}, "fp16", "fp32", false,
       "hyper-connection mixing product, maps and 20 Sinkhorn rounds in fp16: rounding feeds every stream of every "
       "later layer"},
      {"hc_eps", &Numerics::hc_eps, on_off(),
       {K::hc_sinkhorn, K::hc_head}, "off", "on", false,
       "eps_hc flushed to zero: pre weights lose their +1e-6 and Sinkhorn denominators their floor"},
      {"pool_softmax", &Numerics::pool_softmax, types({F32, BF, F16}),
       {K::pool}, "fp16", "fp32", false,
       "compressor/indexer gate softmax over the window in 16 bits"},
      {"index_score", &Numerics::index_score, types({F32, BF, F16}),
       {K::idx_weights, K::idx_score}, "bf16", "fp32", false,
       "indexer head weights, q.k dot products and head sum in bf16: near-ties flip which compressed entries a "
       "query sees"},
      {"routing_bias", &Numerics::routing_bias_in_weights, {{"select_only", false}, {"in_weights", true}},
       {K::moe_weights}, "in_weights", "select_only", false,
       "the routing bias (e_score_correction_bias) added to the weights, not only to the choice"},
      {"routing_norm_eps", &Numerics::routing_norm_eps, on_off(),
       {K::moe_weights}, "off", "on", false,
       "routing weights normalised without the +1e-20: selected scores that underflow to 0 give 0/0 = NaN"},
      {"shared_clip", &Numerics::shared_clip, on_off(),
       {K::moe_shared}, "off", "on", false,
       "the shared expert's SwiGLU without clipping at +-swiglu_limit"},
  });
  return catalog;
}

const KnobInfo& knob_info(const std::string& name) {
  for (const auto& k : knob_catalog())
    if (k.name == name) return k;
  std::vector<std::string> names;
  for (const auto& k : knob_catalog()) names.push_back(k.name);
  input_error("policy: unknown knob '{}' (known: {})", name, fmt::join(names, ", "));
}

KnobSetting parse_knob(const std::string& knob, const std::string& v) {
  const KnobInfo& info = knob_info(knob);
  const auto it = std::find(info.values.begin(), info.values.end(), canonical_value(v));
  if (it == info.values.end())
    input_error("policy: knob '{}' does not take the value '{}' (allowed: {})", knob, v, fmt::join(info.values, ", "));
  return {&info, static_cast<std::size_t>(it - info.values.begin())};
}

void apply_knob(Numerics& n, const KnobSetting& s) {
  std::visit([&](auto member) { n.*member = std::get<std::remove_reference_t<decltype(n.*member)>>(s.knob->typed[s.value]); },
             s.knob->member);
}

void set_knob(Numerics& n, const std::string& knob, const std::string& v) { apply_knob(n, parse_knob(knob, v)); }

std::string get_knob(const Numerics& n, const std::string& knob) {
  const KnobInfo& info = knob_info(knob);
  const KnobValue now = std::visit([&](auto member) { return KnobValue(n.*member); }, info.member);
  for (std::size_t i = 0; i < info.values.size(); ++i)
    if (info.typed[i] == now) return info.values[i];
  return "?";  // a value no text names (a float type the knob does not offer)
}

Numerics preset_numerics(const std::string& preset) {
  Numerics n;  // the defaults are the fixed preset
  if (preset == "fixed") return n;
  if (preset == "fp32") {
    for (const auto& k : knob_catalog())
      if (std::find(k.values.begin(), k.values.end(), "fp32") != k.values.end()) set_knob(n, k.name, "fp32");
    return n;
  }
  if (preset == "naive") {
    for (const auto& k : knob_catalog())
      if (k.in_naive) set_knob(n, k.name, k.bad);
    return n;
  }
  input_error("policy: unknown preset '{}' (naive, fixed, fp32, or a .toml/.json file)", preset);
}

Policy Policy::preset(const std::string& name) {
  Policy p;
  p.name_ = name;
  p.base_ = preset_numerics(name);
  return p;
}

namespace {
std::string toml_value_text(const toml::node& node, const std::string& file, const std::string& key) {
  if (auto s = node.value<std::string>()) return *s;
  if (auto b = node.value<bool>()) return *b ? "on" : "off";
  input_error("{}: knob '{}' must be a string or a boolean", file, key);
}
}  // namespace

Policy Policy::load(const std::string& what) {
  const bool is_file = what.ends_with(".toml") || what.ends_with(".json");
  if (!is_file) return preset(what);
  // A folder named *.toml read as an empty table and ran as an empty policy.
  if (!std::filesystem::is_regular_file(what))
    input_error("{}: {}", what, std::filesystem::exists(what) ? "not a regular file" : "no such policy file");
  std::string preset_name = "fixed";
  std::vector<std::pair<std::string, std::string>> global;
  std::vector<PolicyOverride> overrides;
  if (what.ends_with(".toml")) {
    toml::table tbl;
    try {
      tbl = toml::parse_file(what);
    } catch (const toml::parse_error& e) {
      input_error("{}: {} (line {})", what, std::string(e.description()), e.source().begin.line);
    }
    for (auto&& [k, node] : tbl) {
      const std::string key(k.str());
      if (key == "preset") {
        auto s = node.value<std::string>();
        if (!s) input_error("{}: preset must be a string", what);
        preset_name = *s;
      } else if (key == "global" && node.is_table()) {
        for (auto&& [gk, gv] : *node.as_table()) global.emplace_back(std::string(gk.str()), toml_value_text(gv, what, std::string(gk.str())));
      } else if (key == "override" && node.is_array_of_tables()) {
        for (auto& el : *node.as_array()) {
          PolicyOverride o;
          for (auto&& [ok, ov] : *el.as_table()) {
            const std::string okey(ok.str());
            if (okey == "stages") {
              auto s = ov.value<std::string>();
              if (!s) input_error("{}: override 'stages' must be a string pattern", what);
              o.stages = *s;
            } else {
              o.knobs.emplace_back(okey, toml_value_text(ov, what, okey));
            }
          }
          if (o.stages.empty()) input_error("{}: an [[override]] lacks 'stages'", what);
          o.source = what;
          overrides.push_back(std::move(o));
        }
      } else {
        global.emplace_back(key, toml_value_text(node, what, key));  // top-level knobs apply to every stage
      }
    }
  } else {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text_file(what));
    } catch (const nlohmann::json::exception& e) {
      input_error("{}: not valid JSON ({})", what, e.what());
    }
    auto text = [&](const nlohmann::json& v, const std::string& key) -> std::string {
      if (v.is_string()) return v.get<std::string>();
      if (v.is_boolean()) return v.get<bool>() ? "on" : "off";
      input_error("{}: knob '{}' must be a string or a boolean", what, key);
    };
    for (auto& [k, v] : j.items()) {
      if (k == "preset") preset_name = text(v, k);
      else if (k == "override") {
        for (auto& el : v) {
          PolicyOverride o;
          for (auto& [ok, ov] : el.items()) {
            if (ok == "stages") o.stages = text(ov, ok);
            else o.knobs.emplace_back(ok, text(ov, ok));
          }
          if (o.stages.empty()) input_error("{}: an override lacks 'stages'", what);
          o.source = what;
          overrides.push_back(std::move(o));
        }
      } else if (k == "global") {
        for (auto& [gk, gv] : v.items()) global.emplace_back(gk, text(gv, gk));
      } else {
        global.emplace_back(k, text(v, k));
      }
    }
  }
  Policy p = preset(preset_name);
  p.name_ = what;
  for (auto& [k, v] : global) set_knob(p.base_, k, v);
  p.resolved_ = std::make_shared<Resolved>();  // the base changed
  for (auto& o : overrides) p.add_override(std::move(o));
  return p;
}

void Policy::add_set(const std::string& spec) {
  const auto eq = spec.find('=');
  if (eq == std::string::npos) input_error("--set '{}': expected [PATTERN:]knob=value", spec);
  const auto colon = spec.rfind(':', eq);
  if (const std::string key = spec.substr(colon == std::string::npos ? 0 : colon + 1, eq - (colon == std::string::npos ? 0 : colon + 1));
      is_split_setting(key)) {
    if (colon != std::string::npos)
      input_error("--set '{}': {} is run-wide (every rank runs every stage); write '{}={}' without a stage pattern", spec,
                  key, key, spec.substr(eq + 1));
    set_split(split_, key, spec.substr(eq + 1));
    return;
  }
  PolicyOverride o;
  o.stages = colon == std::string::npos ? "*" : spec.substr(0, colon);
  const std::string knob = spec.substr(colon == std::string::npos ? 0 : colon + 1, eq - (colon == std::string::npos ? 0 : colon + 1));
  o.knobs.emplace_back(knob, spec.substr(eq + 1));
  o.source = "--set '" + spec + "'";
  add_override(std::move(o));
}

void Policy::add_override(PolicyOverride o) {
  TypedOverride typed{o.stages, {}, o.source.empty() ? "policy" : o.source};
  for (auto& [k, v] : o.knobs) typed.settings.push_back(parse_knob(k, v));  // errors now, not at resolve()
  for (auto& [k, v] : o.knobs) described_ += fmt::format(" + {}:{}={}", o.stages, k, v);
  overrides_.push_back(std::move(typed));
  resolved_ = std::make_shared<Resolved>();
}

namespace {
std::string kind_list(const std::vector<OpKind>& kinds) {
  std::vector<std::string> names;
  for (OpKind k : kinds) names.push_back(op_kind_name(k));
  return fmt::format("{}", fmt::join(names, ", "));
}

// The knob must apply to at least one matched stage; the error names the knob, the stage(s)
// with their kinds, and the kinds it applies to.
void check_knob_applies(const std::string& source, const KnobInfo& knob, const std::vector<const Stage*>& matched) {
  std::vector<OpKind> kinds;
  for (const Stage* s : matched) {
    if (std::find(knob.kinds.begin(), knob.kinds.end(), s->kind) != knob.kinds.end()) return;
    if (std::find(kinds.begin(), kinds.end(), s->kind) == kinds.end()) kinds.push_back(s->kind);
  }
  std::vector<std::string> names;
  for (std::size_t i = 0; i < std::min<std::size_t>(matched.size(), 3); ++i) names.push_back(matched[i]->name);
  const std::string where =
      matched.size() == 1
          ? fmt::format("stage {} (operator kind {})", matched[0]->name, op_kind_name(matched[0]->kind))
          : fmt::format("any of the {} stages it matches ({}{}; operator kinds {})", matched.size(), fmt::join(names, ", "),
                        matched.size() > names.size() ? ", ..." : "", kind_list(kinds));
  input_error("{}: knob '{}' does not apply to {}; it applies to the operator kinds {}", source, knob.name, where,
              kind_list(knob.kinds));
}
}  // namespace

void Policy::validate(const std::vector<Stage>& stages) const {
  for (const auto& o : overrides_) {
    std::vector<const Stage*> matched;
    for (const auto& s : stages)
      if (pattern_matches(o.stages, s.name)) matched.push_back(&s);
    if (matched.empty()) input_error("{}: stage pattern '{}' matches no stage of this model", o.source, o.stages);
    for (const auto& setting : o.settings) check_knob_applies(o.source, *setting.knob, matched);
  }
}

Numerics Policy::resolve(const std::string& stage) const {
  if (!resolved_) return match_overrides(stage);  // a moved-from policy
  std::lock_guard<std::mutex> lock(resolved_->mutex);
  auto it = resolved_->by_stage.find(stage);
  if (it == resolved_->by_stage.end()) it = resolved_->by_stage.emplace(stage, match_overrides(stage)).first;
  return it->second;
}

Numerics Policy::match_overrides(const std::string& stage) const {
  Numerics n = base_;
  for (const auto& o : overrides_)
    if (pattern_matches(o.stages, stage))
      for (const auto& setting : o.settings) apply_knob(n, setting);
  return n;
}

std::string Policy::describe() const {
  if (!split_.active()) return name_ + described_;
  // " + key=value" per setting, so a saved run's policy text replays through add_set.
  std::string s = split_.describe();
  for (std::size_t at = 0; (at = s.find(' ', at)) != std::string::npos; at += 3) s.replace(at, 1, " + ");
  return name_ + described_ + " + " + s;
}

Policy::Expanded Policy::expand(const std::vector<Stage>& stages) const {
  Numerics common = base_;  // what a stage gets when no override singles it out
  for (const auto& o : overrides_) {
    bool everywhere = !stages.empty();
    for (const auto& s : stages) everywhere = everywhere && pattern_matches(o.stages, s.name);
    if (everywhere)
      for (const auto& setting : o.settings) apply_knob(common, setting);
  }
  Expanded e;
  for (const auto& k : knob_catalog()) e.knobs += (e.knobs.empty() ? "" : " ") + k.name + "=" + get_knob(common, k.name);
  for (const auto& s : stages) {
    const Numerics n = resolve(s.name);
    std::string line;
    for (const auto& k : knob_catalog()) {
      if (std::find(k.kinds.begin(), k.kinds.end(), s.kind) == k.kinds.end()) continue;
      if (const std::string v = get_knob(n, k.name); v != get_knob(common, k.name))
        line += (line.empty() ? "" : " ") + k.name + "=" + v;
    }
    if (!line.empty()) e.stages.push_back(s.name + ": " + line);
  }
  return e;
}

}  // namespace tdiff
