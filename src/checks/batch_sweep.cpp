// Batch invariance (bisect/determinism.h): a prompt's results must not depend on which other
// prompts share its batch, on its row, or on how far the batch is padded.
#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include <fmt/format.h>

#include "checks/determinism.h"
#include "checks/finding_table.h"
#include "exec/row_slice.h"
#include "casefile/case_file.h"
#include "base/error.h"
#include "backend/executor.h"
#include "model/pattern.h"

namespace tdiff {

namespace {

std::vector<SweepBatch> plan_batches(const std::vector<std::vector<std::int64_t>>& prompts, std::vector<int> sizes,
                                     const std::vector<bool>& sides) {
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const int m = static_cast<int>(prompts.size());
  std::vector<SweepBatch> out;
  for (int b : sizes)
    for (bool left : sides) {
      if (b == 1 && left != sides.front()) continue;  // a prompt alone has no padding
      for (int i = 0; i < m; ++i) {
        SweepBatch sb;
        sb.size = b;
        sb.pad_left = b > 1 && left;
        for (int j = 0; j < b; ++j) {
          const int p = (i + j) % m;
          sb.prompts.push_back(p);
          sb.seq = std::max<std::int64_t>(sb.seq, static_cast<std::int64_t>(prompts[static_cast<std::size_t>(p)].size()));
        }
        out.push_back(std::move(sb));
      }
    }
  return out;
}

}  // namespace

BatchSweepResult check_batch_invariance(CaseSession& session, const BackendFactory& make, const BatchSweepOptions& opt) {
  if (opt.sizes.empty()) input_error("determinism: --batch-sweep needs at least one batch size");
  for (int b : opt.sizes)
    if (b < 1) input_error("determinism: batch sizes must be positive (got {})", b);
  if (opt.pad_left.empty()) input_error("determinism: no padding side to sweep");
  if (!opt.stages.empty()) select_stages(opt.stages, session.stages);
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& c = session.info.config;
  const auto prompts = batch_prompts(session.info.batch);

  BatchSweepResult res;
  res.prompts = static_cast<int>(prompts.size());
  res.batches = plan_batches(prompts, opt.sizes, opt.pad_left);
  FindingTable table(session.stages, opt.stages);
  std::vector<std::map<std::string, Tensor>> base(prompts.size());  // each prompt's first occurrence
  std::map<int, std::map<std::string, std::pair<double, bool>>> per_size;  // size -> key -> (max_abs, origin)
  auto backend = make(opt.seed);

  for (std::size_t bi = 0; bi < res.batches.size(); ++bi) {
    const SweepBatch& sb = res.batches[bi];
    if (opt.progress) opt.progress(bi, res.batches.size(), sb);
    PromptSet ps;
    ps.source = "batch sweep";
    for (int p : sb.prompts) {
      ps.ids.push_back(prompts[static_cast<std::size_t>(p)]);
      ps.lines.emplace_back();
      ps.line_no.push_back(p + 1);
    }
    const Batch batch = pad_prompts(ps, 0, sb.pad_left, c.vocab_size);
    std::vector<std::set<std::string>> differing(sb.prompts.size());  // per row
    ExecutorHooks hooks;
    hooks.on_stage = [&](const Stage& s, std::size_t, const std::vector<Tensor>& out) {
      for (std::size_t r = 0; r < sb.prompts.size(); ++r) {
        const auto p = static_cast<std::size_t>(sb.prompts[r]);
        bool inputs_identical = true;
        for (const auto& in : s.inputs) inputs_identical = inputs_identical && !differing[r].count(in.key());
        for (std::size_t j = 0; j < out.size(); ++j) {
          const std::string key = s.name + "/" + s.outputs[j];
          Tensor mine = row_slice(s, out[j], batch, static_cast<std::int64_t>(r), c);
          auto it = base[p].find(key);
          if (it == base[p].end()) {
            base[p].emplace(key, std::move(mine));
            continue;
          }
          const std::string label = fmt::format("prompt {} at row {} of the {}", p, r, sb.label());
          const BitDiff d = table.record(s, s.outputs[j], it->second, mine, static_cast<int>(bi), label, inputs_identical);
          if (d.identical()) continue;
          differing[r].insert(key);
          if (!pattern_matches(opt.stages, s.name)) continue;
          auto& [mx, origin] = per_size[sb.size][key];
          mx = std::max(mx, d.max_abs);
          origin = origin || inputs_identical;
        }
      }
    };
    RunContext ctx{c, *session.weights, batch, TieRule::lowest_index};
    TensorMap env;
    put_inputs(batch, env);
    execute(session.stages, [&](const Stage&) -> Backend& { return *backend; }, ctx, env, hooks);
  }

  for (const auto& sb : res.batches) {
    if (res.sizes.empty() || res.sizes.back().size != sb.size) { SizeSummary z; z.size = sb.size; res.sizes.push_back(z); }
    ++res.sizes.back().batches;
  }
  for (auto& sz : res.sizes) {
    const auto& keys = per_size[sz.size];
    sz.tensors_differing = static_cast<int>(keys.size());
    for (const auto& s : session.stages) {
      for (const auto& t : s.outputs) {
        auto it = keys.find(s.name + "/" + t);
        if (it == keys.end()) continue;
        sz.max_abs = std::max(sz.max_abs, it->second.first);
        if (it->second.second && sz.first_origin.empty()) sz.first_origin = s.name;
      }
    }
  }
  res.findings = table.findings();
  res.table = table.table("each prompt alone (its first batch)", "the same prompt in the batch where it differs most",
                          "batches");
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::string known_batch_variance(const std::string& backend, const Policy& policy, const Stage& s) {
  if (backend != "emu") return "";
  const Numerics n = policy.resolve(s.name);
  const OpInfo& op = op_info(s.kind);
  if (s.kind == OpKind::attention)
    return "known: emu's flash attention walks the keys in blocks of 64 counted from the start of the padded "
           "batch ([S padded keys ; S/m compressed entries]); another padded length or padding side moves the "
           "row's keys and entries across block boundaries, so the online-softmax max and rescale happen at other "
           "points (last-bit differences). A batch-invariant kernel counts blocks from the row's own first key.";
  if (op.selection && n.topk_ties == TieBreak::unstable)
    return "known: topk_ties=unstable draws the tie order per token of the batch, so a token at another row "
           "breaks its ties another way";
  if (op.split_k && n.reduction == Reduction::atomic)
    return "known: reduction=atomic draws the order of the split-K / expert partial sums per output element of "
           "the batch, so a token at another row adds them in another order";
  return "";
}

}  // namespace tdiff
