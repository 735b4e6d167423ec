import json, torch, transformers, os, inspect
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM
out = os.environ.get("OUT", "/tmp")
print("transformers", transformers.__version__, "torch", torch.__version__)
cfg = DeepseekV4Config()
d = cfg.to_dict()
print(json.dumps(d, indent=1, default=str))
tiny = dict(vocab_size=256, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, head_dim=32,
            partial_rotary_factor=0.25, q_lora_rank=32, o_groups=2, o_lora_rank=16, sliding_window=8,
            layer_types=["sliding_attention","compressed_sparse_attention","heavily_compressed_attention","compressed_sparse_attention"],
            compress_rates={"compressed_sparse_attention":4,"heavily_compressed_attention":8},
            mlp_layer_types=["hash_moe","moe","moe","moe"], index_n_heads=4, index_head_dim=16, index_topk=4,
            n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)
c2 = DeepseekV4Config(**tiny)
print("TINY", json.dumps(c2.to_dict(), indent=1, default=str))
m = DeepseekV4ForCausalLM(c2)
for k, v in m.state_dict().items(): print("SD", k, tuple(v.shape), v.dtype)
for n, mod in m.named_modules(): print("MOD", n, type(mod).__name__)
src = inspect.getsourcefile(DeepseekV4ForCausalLM)
import shutil; shutil.copy(src, out + "/modeling_deepseek_v4.py")
shutil.copy(inspect.getsourcefile(DeepseekV4Config), out + "/configuration_deepseek_v4.py")
