#include "formats/weight_spec.h"

#include <fmt/format.h>

namespace tdiff {

std::map<std::string, WeightSpec> expected_weights(const ModelConfig& c) {
  std::map<std::string, WeightSpec> w;
  const auto D = c.hidden_size, V = c.vocab_size, H = c.num_attention_heads, d = c.head_dim;
  const auto nhc = c.hc_mult, M = c.hc_mix_width(), E = c.n_routed_experts, I = c.moe_intermediate_size;
  w["model.embed_tokens.weight"] = {{V, D}};
  w["model.hc_head.hc_fn"] = {{nhc, nhc * D}};
  w["model.hc_head.hc_base"] = {{nhc}};
  w["model.hc_head.hc_scale"] = {{1}};
  w["model.norm.weight"] = {{D}};
  w["lm_head.weight"] = {{V, D}};
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string P = fmt::format("model.layers.{}.", l);
    for (const char* site : {"attn_hc.", "ffn_hc."}) {
      w[P + site + "fn"] = {{M, nhc * D}};
      w[P + site + "base"] = {{M}};
      w[P + site + "scale"] = {{3}};
    }
    w[P + "input_layernorm.weight"] = {{D}};
    w[P + "post_attention_layernorm.weight"] = {{D}};
    const std::string A = P + "self_attn.";
    w[A + "q_a_proj.weight"] = {{c.q_lora_rank, D}};
    w[A + "q_a_norm.weight"] = {{c.q_lora_rank}};
    w[A + "q_b_proj.weight"] = {{H * d, c.q_lora_rank}};
    w[A + "kv_proj.weight"] = {{d, D}};
    w[A + "kv_norm.weight"] = {{d}};
    w[A + "o_a_proj.weight"] = {{c.o_groups * c.o_lora_rank, H * d / c.o_groups}};
    w[A + "o_b_proj.weight"] = {{D, c.o_groups * c.o_lora_rank}};
    w[A + "sinks"] = {{H}};
    const LayerType lt = c.layer_types[static_cast<std::size_t>(l)];
    if (lt != LayerType::sliding) {
      const std::int64_t width = lt == LayerType::csa ? 2 : 1, rate = c.rate(lt);
      const std::string C = A + "compressor.";
      w[C + "kv_proj.weight"] = {{width * d, D}};
      w[C + "gate_proj.weight"] = {{width * d, D}};
      w[C + "position_bias"] = {{rate, width * d}};
      w[C + "kv_norm.weight"] = {{d}};
      if (lt == LayerType::csa) {
        const std::string X = C + "indexer.";
        const auto dI = c.index_head_dim, HI = c.index_n_heads;
        w[X + "kv_proj.weight"] = {{2 * dI, D}};
        w[X + "gate_proj.weight"] = {{2 * dI, D}};
        w[X + "position_bias"] = {{rate, 2 * dI}};
        w[X + "kv_norm.weight"] = {{dI}};
        w[X + "q_b_proj.weight"] = {{HI * dI, c.q_lora_rank}};
        w[X + "scorer.weights_proj.weight"] = {{HI, D}};
      }
    }
    const std::string F = P + "mlp.";
    w[F + "gate.weight"] = {{E, D}};
    if (c.mlp_types[static_cast<std::size_t>(l)] == MlpType::hash_moe)
      w[F + "gate.tid2eid"] = {{V, c.num_experts_per_tok}, true};
    else
      w[F + "gate.e_score_correction_bias"] = {{E}};
    w[F + "experts.gate_up_proj"] = {{E, 2 * I, D}};
    w[F + "experts.down_proj"] = {{E, D, I}};
    w[F + "shared_experts.gate_proj.weight"] = {{I, D}};
    w[F + "shared_experts.up_proj.weight"] = {{I, D}};
    w[F + "shared_experts.down_proj.weight"] = {{D, I}};
  }
  return w;
}

}  // namespace tdiff
