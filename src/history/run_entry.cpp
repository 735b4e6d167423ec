#include "history/run_entry.h"

#include <fmt/format.h>

namespace tdiff::history {

namespace {

// "L03.attn.core" -> "attn.core"; "lm_head" stays.
std::string op_class_of(const std::string& stage) {
  if (stage.size() > 1 && stage[0] == 'L' && std::isdigit(static_cast<unsigned char>(stage[1]))) {
    const auto dot = stage.find('.');
    if (dot != std::string::npos) return stage.substr(dot + 1);
  }
  return stage;
}

}  // namespace

void add_compare(RunEntry& e, const CompareResult& diff) {
  for (const TensorDiff& d : diff.rows) {
    StageRecord s;
    s.key = d.key();
    s.op_class = op_class_of(d.stage);
    s.error = d.routing ? d.routing->mismatch_share : d.metrics.rel_l2;
    if (d.expected) s.expected = d.expected->rel;
    s.ratio = d.tolerance_ratio;
    s.verdict = verdict_name(d.verdict);
    e.stages.push_back(std::move(s));
    if (d.logits) {
      e.logits_kl = d.logits->kl_mean;
      e.logits_top1 = d.logits->top1_agree;
      e.logits_top10 = d.logits->topk_overlap_mean;
    }
  }
  e.verdict = verdict_name(diff.verdict);
  e.first_divergence = diff.first_fail >= 0 ? diff.rows[static_cast<std::size_t>(diff.first_fail)].key() : "";
}

std::string build_of(const EnvRecord& env) {
  for (const char* key : {"dump.engine", "engine"})
    if (const auto it = env.extra.find(key); it != env.extra.end() && !it->second.empty()) return it->second;
  return env.git_commit;
}

std::string default_label(const RunEntry& e) {
  if (e.backend == "dump" || e.backend == "engine") return e.build;
  return fmt::format("{} {} {}", e.build, e.backend, e.policy);
}

}  // namespace tdiff::history
