#include "model/stage_graph.h"

#include <fmt/format.h>

namespace tdiff {

namespace {

// Appends stages; keeps the bookkeeping of names and weight prefixes in one place.
class Builder {
 public:
  std::vector<Stage> stages;

  // The stage is named "<layer prefix><op_class>" ("L03." + "attn.core").
  Stage& add(std::string op_class, OpKind kind, std::vector<TensorRef> in, std::vector<std::string> out,
             std::vector<std::string> weights = {}) {
    Stage s;
    s.name = name(op_class);
    s.op_class = std::move(op_class);
    s.kind = kind;
    s.layer = layer_;
    s.layer_type = layer_type_;
    s.inputs = std::move(in);
    s.outputs = std::move(out);
    s.weights = std::move(weights);
    stages.push_back(std::move(s));
    return stages.back();
  }
  std::string name(const std::string& op_class) const { return prefix_ + op_class; }
  void set_layer(int l, LayerType t) {
    layer_ = l;
    layer_type_ = t;
    prefix_ = l >= 0 ? fmt::format("L{:02d}.", l) : "";
  }

 private:
  int layer_ = -1;
  std::string prefix_;
  LayerType layer_type_ = LayerType::sliding;
};

TensorRef ref(const std::string& stage, const std::string& tensor) { return {stage, tensor}; }

const TensorRef kIds = ref("inputs", "ids"), kMask = ref("inputs", "mask"), kPos = ref("inputs", "pos");

// What every stage of one layer needs: its weight prefix and its RoPE table.
struct LayerParts {
  int layer;
  LayerType type;
  std::string P;    // "model.layers.<l>."
  bool compressed;  // CSA or HCA: the compress RoPE table
  TensorRef cos, sin;
};

// The embedding, the stream expansion, both RoPE tables and the window mask.
TensorRef add_prologue(Builder& b) {
  b.add("embed", OpKind::embed, {kIds}, {"e"}, {"model.embed_tokens.weight"});
  b.add("hc.expand", OpKind::hc_expand, {ref("embed", "e")}, {"X"});
  b.add("rope.main", OpKind::rope_table, {kPos}, {"cos", "sin"});
  b.add("rope.compress", OpKind::rope_table, {kPos}, {"cos", "sin"}).compress_rope = true;
  b.add("mask.window", OpKind::window_mask, {kMask}, {"mask"});
  return ref("hc.expand", "X");
}

// A CSA layer's lightning indexer: its own compressed keys, queries from q_res, and the
// top-k selection of compressed entries.
void add_indexer(Builder& b, const ModelConfig& c, const LayerParts& k, const TensorRef& h, const TensorRef& q_res,
                 std::int64_t rate) {
  auto stage = [&](const char* s) { return b.name(s); };
  const std::string I = k.P + "self_attn.compressor.indexer.";
  b.add("attn.idx.proj", OpKind::cmp_proj, {h}, {"P", "Z"}, {I + "kv_proj.weight", I + "gate_proj.weight"});
  Stage& ip = b.add("attn.idx.pool", OpKind::pool,
                    {ref(stage("attn.idx.proj"), "P"), ref(stage("attn.idx.proj"), "Z"), kMask}, {"out"},
                    {I + "position_bias"});
  ip.rate = rate, ip.overlap = true, ip.width = c.index_head_dim;
  b.add("attn.idx.norm", OpKind::rms_norm, {ref(stage("attn.idx.pool"), "out")}, {"out"}, {I + "kv_norm.weight"});
  Stage& ir = b.add("attn.idx.rope", OpKind::entry_rope, {ref(stage("attn.idx.norm"), "out")}, {"KI"});
  ir.rate = rate, ir.compress_rope = true;
  b.add("attn.idx.q", OpKind::linear, {q_res}, {"out"}, {I + "q_b_proj.weight"}).width = c.index_head_dim;
  b.add("attn.idx.q_rope", OpKind::rope,
        {ref(stage("attn.idx.q"), "out"), ref("rope.compress", "cos"), ref("rope.compress", "sin")}, {"QI"})
      .compress_rope = true;
  b.add("attn.idx.weights", OpKind::idx_weights, {h}, {"w"}, {I + "scorer.weights_proj.weight"});
  b.add("attn.idx.score", OpKind::idx_score,
        {ref(stage("attn.idx.q_rope"), "QI"), ref(stage("attn.idx.rope"), "KI"), ref(stage("attn.idx.weights"), "w"), kPos},
        {"score"}).rate = rate;
  b.add("attn.idx.topk", OpKind::idx_topk, {ref(stage("attn.idx.score"), "score"), kPos, kMask}, {"sel"}).rate = rate;
}

// A compressed layer's compressor (pooled, normed, rotated entries) and their mask, with the
// indexer's selection on CSA layers; appends the entries and the mask to the core's inputs.
void add_compressor(Builder& b, const ModelConfig& c, const LayerParts& k, const TensorRef& h, const TensorRef& q_res,
                    std::vector<TensorRef>& core_in) {
  auto stage = [&](const char* s) { return b.name(s); };
  const std::int64_t rate = c.rate(k.type);
  const bool csa = k.type == LayerType::csa;
  const std::string C = k.P + "self_attn.compressor.";
  b.add("attn.cmp.proj", OpKind::cmp_proj, {h}, {"P", "Z"}, {C + "kv_proj.weight", C + "gate_proj.weight"});
  Stage& pool = b.add("attn.cmp.pool", OpKind::pool,
                      {ref(stage("attn.cmp.proj"), "P"), ref(stage("attn.cmp.proj"), "Z"), kMask}, {"out"},
                      {C + "position_bias"});
  pool.rate = rate, pool.overlap = csa, pool.width = c.head_dim;
  b.add("attn.cmp.norm", OpKind::rms_norm, {ref(stage("attn.cmp.pool"), "out")}, {"out"}, {C + "kv_norm.weight"});
  Stage& er = b.add("attn.cmp.rope", OpKind::entry_rope, {ref(stage("attn.cmp.norm"), "out")}, {"C"});
  er.rate = rate, er.compress_rope = true;
  if (csa) {
    add_indexer(b, c, k, h, q_res, rate);
    b.add("attn.cmp.mask", OpKind::cmp_mask, {ref(stage("attn.cmp.rope"), "C"), kPos, ref(stage("attn.idx.topk"), "sel")},
          {"mask"}).rate = rate;
  } else {
    b.add("attn.cmp.mask", OpKind::cmp_mask, {ref(stage("attn.cmp.rope"), "C"), kPos}, {"mask"}).rate = rate;
  }
  core_in.push_back(ref(stage("attn.cmp.rope"), "C"));
  core_in.push_back(ref(stage("attn.cmp.mask"), "mask"));
}

// The attention half of a layer: hyper-connection in, queries and keys, the compressor on
// CSA/HCA layers, the core, the output projections, hyper-connection out. Returns the stream.
TensorRef add_attention_half(Builder& b, const ModelConfig& c, const LayerParts& k, const TensorRef& X) {
  auto stage = [&](const char* s) { return b.name(s); };
  auto mark_rope = [&](Stage& s) -> Stage& { s.compress_rope = k.compressed; return s; };
  const std::string& P = k.P;
  b.add("hc_attn.mix", OpKind::hc_mix, {X}, {"mix"}, {P + "attn_hc.fn"});
  b.add("hc_attn.sinkhorn", OpKind::hc_sinkhorn, {ref(stage("hc_attn.mix"), "mix")},
        {"pre", "post", "comb"}, {P + "attn_hc.base", P + "attn_hc.scale"});
  b.add("hc_attn.pre", OpKind::hc_pre, {X, ref(stage("hc_attn.sinkhorn"), "pre")}, {"x"});
  b.add("attn_norm", OpKind::rms_norm, {ref(stage("hc_attn.pre"), "x")}, {"h"}, {P + "input_layernorm.weight"})
      .stream_input = true;
  const TensorRef h = ref(stage("attn_norm"), "h");
  b.add("attn.q_a", OpKind::linear, {h}, {"out"}, {P + "self_attn.q_a_proj.weight"});
  b.add("attn.q_a_norm", OpKind::rms_norm, {ref(stage("attn.q_a"), "out")}, {"q_res"}, {P + "self_attn.q_a_norm.weight"});
  const TensorRef q_res = ref(stage("attn.q_a_norm"), "q_res");
  b.add("attn.q_b", OpKind::linear, {q_res}, {"out"}, {P + "self_attn.q_b_proj.weight"}).width = c.head_dim;
  b.add("attn.q_norm", OpKind::head_rms_norm, {ref(stage("attn.q_b"), "out")}, {"out"}).width = c.head_dim;
  mark_rope(b.add("attn.q_rope", OpKind::rope, {ref(stage("attn.q_norm"), "out"), k.cos, k.sin}, {"q"}));
  b.add("attn.kv", OpKind::linear, {h}, {"out"}, {P + "self_attn.kv_proj.weight"});
  b.add("attn.kv_norm", OpKind::rms_norm, {ref(stage("attn.kv"), "out")}, {"out"}, {P + "self_attn.kv_norm.weight"});
  mark_rope(b.add("attn.kv_rope", OpKind::rope, {ref(stage("attn.kv_norm"), "out"), k.cos, k.sin}, {"kv"}));

  std::vector<TensorRef> core_in = {ref(stage("attn.q_rope"), "q"), ref(stage("attn.kv_rope"), "kv"),
                                    ref("mask.window", "mask")};
  if (k.compressed) add_compressor(b, c, k, h, q_res, core_in);
  b.add("attn.core", OpKind::attention, core_in, {"o"}, {P + "self_attn.sinks"});
  mark_rope(b.add("attn.o_rope", OpKind::rope_inverse, {ref(stage("attn.core"), "o"), k.cos, k.sin}, {"out"}));
  b.add("attn.o_a", OpKind::grouped_linear, {ref(stage("attn.o_rope"), "out")}, {"out"}, {P + "self_attn.o_a_proj.weight"});
  b.add("attn.o_b", OpKind::linear, {ref(stage("attn.o_a"), "out")}, {"a"}, {P + "self_attn.o_b_proj.weight"});
  b.add("hc_attn.post", OpKind::hc_post,
        {X, ref(stage("attn.o_b"), "a"), ref(stage("hc_attn.sinkhorn"), "post"), ref(stage("hc_attn.sinkhorn"), "comb")}, {"X"});
  return ref(stage("hc_attn.post"), "X");
}

// The MoE half of a layer: hyper-connection in, router, selection (hash or top-k), experts,
// the shared expert, hyper-connection out. Returns the stream.
TensorRef add_moe_half(Builder& b, const ModelConfig& c, const LayerParts& k, const TensorRef& X) {
  auto stage = [&](const char* s) { return b.name(s); };
  const std::string& P = k.P;
  b.add("hc_ffn.mix", OpKind::hc_mix, {X}, {"mix"}, {P + "ffn_hc.fn"});
  b.add("hc_ffn.sinkhorn", OpKind::hc_sinkhorn, {ref(stage("hc_ffn.mix"), "mix")}, {"pre", "post", "comb"},
        {P + "ffn_hc.base", P + "ffn_hc.scale"});
  b.add("hc_ffn.pre", OpKind::hc_pre, {X, ref(stage("hc_ffn.sinkhorn"), "pre")}, {"x"});
  b.add("ffn_norm", OpKind::rms_norm, {ref(stage("hc_ffn.pre"), "x")}, {"z"}, {P + "post_attention_layernorm.weight"})
      .stream_input = true;
  const TensorRef z = ref(stage("ffn_norm"), "z");
  b.add("moe.router", OpKind::router, {z}, {"logit", "score"}, {P + "mlp.gate.weight"});
  if (c.mlp_types[static_cast<std::size_t>(k.layer)] == MlpType::hash_moe)
    b.add("moe.select", OpKind::moe_select, {ref(stage("moe.router"), "score"), kIds}, {"idx"}, {P + "mlp.gate.tid2eid"});
  else
    b.add("moe.select", OpKind::moe_select, {ref(stage("moe.router"), "score")}, {"idx"},
          {P + "mlp.gate.e_score_correction_bias"});
  b.add("moe.weights", OpKind::moe_weights, {ref(stage("moe.router"), "score"), ref(stage("moe.select"), "idx")}, {"wt"});
  b.add("moe.experts", OpKind::moe_experts, {z, ref(stage("moe.select"), "idx"), ref(stage("moe.weights"), "wt")},
        {"routed"}, {P + "mlp.experts.gate_up_proj", P + "mlp.experts.down_proj"});
  b.add("moe.shared", OpKind::moe_shared, {z}, {"shared"},
        {P + "mlp.shared_experts.gate_proj.weight", P + "mlp.shared_experts.up_proj.weight",
         P + "mlp.shared_experts.down_proj.weight"});
  b.add("moe.out", OpKind::add, {ref(stage("moe.experts"), "routed"), ref(stage("moe.shared"), "shared"), z}, {"f"});
  b.add("hc_ffn.post", OpKind::hc_post,
        {X, ref(stage("moe.out"), "f"), ref(stage("hc_ffn.sinkhorn"), "post"), ref(stage("hc_ffn.sinkhorn"), "comb")}, {"X"});
  return ref(stage("hc_ffn.post"), "X");
}

// The stream's collapse, the final norm and the LM head.
void add_epilogue(Builder& b, const TensorRef& X) {
  b.set_layer(-1, LayerType::sliding);
  b.add("final.hc_head", OpKind::hc_head, {X}, {"y", "preh"},
        {"model.hc_head.hc_fn", "model.hc_head.hc_base", "model.hc_head.hc_scale"});
  b.add("final.norm", OpKind::rms_norm, {ref("final.hc_head", "y")}, {"out"}, {"model.norm.weight"}).stream_input = true;
  b.add("lm_head", OpKind::lm_head, {ref("final.norm", "out")}, {"logits"}, {"lm_head.weight"});
}

}  // namespace

std::vector<Stage> build_stages(const ModelConfig& c) {
  Builder b;
  TensorRef X = add_prologue(b);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerType lt = c.layer_types[static_cast<std::size_t>(l)];
    b.set_layer(l, lt);
    const bool compressed = lt != LayerType::sliding;
    const std::string table = compressed ? "rope.compress" : "rope.main";
    const LayerParts k{l, lt, fmt::format("model.layers.{}.", l), compressed, ref(table, "cos"), ref(table, "sin")};
    X = add_attention_half(b, c, k, X);
    X = add_moe_half(b, c, k, X);
  }
  add_epilogue(b, X);
  return std::move(b.stages);
}

std::vector<std::string> output_keys(const std::vector<Stage>& stages) {
  std::vector<std::string> keys;
  for (const auto& s : stages)
    for (const auto& t : s.outputs) keys.push_back(s.name + "/" + t);
  return keys;
}

}  // namespace tdiff
