"""The decoder configuration (one dataclass for every family) and the named presets."""

import dataclasses
import json
from dataclasses import dataclass, field

from gradcraft.errors import UserError


DROPOUT_FIELDS = ("dropout", "attn_dropout", "resid_dropout", "embd_dropout")


@dataclass
class ModelConfig:
    vocab_size: int = 8192
    # The training matmuls of the output layer run over a vocabulary padded with zero rows to a
    # multiple of this (gpt2's 50257 -> 50304): cuBLAS picks much slower kernels for an odd size.
    # Invisible outside the loss: logits, weights, checkpoints and tokenizers keep vocab_size.
    # 0 or 1: no padding.
    vocab_pad_multiple: int = 64
    seq_len: int = 256  # context length
    dim: int = 256
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int | None = None  # < n_heads: grouped-query attention; None: = n_heads
    ffn_dim: int | None = None  # None: 4 * dim (GELU) or the 8/3 * dim rounded up to 64 (SwiGLU)
    norm: str = "layernorm"  # layernorm | rmsnorm
    norm_eps: float = 1e-5
    mlp: str = "gelu"  # gelu | swiglu
    gelu_approximate: str = "tanh"  # GPT-2's "gelu_new"; "none" for the erf form
    learned_beta: bool = False  # SwiGLU with a learned Swish beta per layer: x * sigmoid(beta * x)
    positions: str = "learned"  # learned | rope
    rope_base: float = 10000.0
    bias: bool = True
    mlp_bias: bool | None = None  # biases in the MLP's two linears; None: = bias (K2: attention without, MLP with)
    tie_embeddings: bool = True
    # Dropout probabilities, where GPT-2 and nanoGPT put them: after the embeddings (embd), on the
    # attention weights (attn) and on the residual branch after each attention/MLP output projection
    # (resid). Each of the three defaults (None) to `dropout`. `model.eval()` turns all off.
    dropout: float = 0.0
    attn_dropout: float | None = None
    resid_dropout: float | None = None
    embd_dropout: float | None = None
    init_std: float = 0.02
    attention_pattern: str = ""  # per layer, L (local, sliding window) or G (global); "" = all global
    window: int = 0  # sliding-window size of local layers
    ffn_pattern: str = ""  # per layer, D (dense) or M (mixture of experts); "" = all dense
    n_experts: int = 4
    experts_per_token: int = 2
    capacity_factor: float | None = 1.25  # None or 0: no capacity limit
    moe_balance: float = 0.01  # load-balancing loss coefficient
    moe_zloss: float = 0.001  # router z-loss coefficient
    extra: dict = field(default_factory=dict)  # free-form notes (e.g. the preset name)

    def __post_init__(self):
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.mlp_bias is None:
            self.mlp_bias = self.bias
        if self.ffn_dim is None:
            self.ffn_dim = 4 * self.dim if self.mlp == "gelu" else 64 * -(-int(8 * self.dim / 3) // 64)
        for name in DROPOUT_FIELDS[1:]:
            if getattr(self, name) is None:
                setattr(self, name, self.dropout)
        self.validate()

    def validate(self) -> None:
        def bad(msg):
            raise UserError(f"invalid model config: {msg}")
        if self.dim % self.n_heads:
            bad(f"dim {self.dim} is not divisible by n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            bad(f"n_heads {self.n_heads} is not divisible by n_kv_heads {self.n_kv_heads}")
        if self.norm not in ("layernorm", "rmsnorm"):
            bad(f"norm must be layernorm or rmsnorm, got {self.norm!r}")
        if self.mlp not in ("gelu", "swiglu"):
            bad(f"mlp must be gelu or swiglu, got {self.mlp!r}")
        if self.positions not in ("learned", "rope"):
            bad(f"positions must be learned or rope, got {self.positions!r}")
        if self.positions == "rope" and self.head_dim % 2:
            bad(f"RoPE needs an even head dimension, got {self.head_dim}")
        if self.attention_pattern and (set(self.attention_pattern) - {"L", "G"}
                                       or len(self.attention_pattern) != self.n_layers):
            bad(f"attention_pattern must have one L or G per layer ({self.n_layers}), got {self.attention_pattern!r}")
        if self.ffn_pattern and (set(self.ffn_pattern) - {"D", "M"} or len(self.ffn_pattern) != self.n_layers):
            bad(f"ffn_pattern must have one D or M per layer ({self.n_layers}), got {self.ffn_pattern!r}")
        if "M" in self.ffn_pattern and not 1 <= self.experts_per_token <= self.n_experts:
            bad(f"experts_per_token must be between 1 and n_experts ({self.n_experts})")
        if "M" in self.ffn_pattern and self.mlp != "swiglu":
            bad("mixture-of-experts layers use SwiGLU experts: set mlp to swiglu")
        if "L" in self.attention_pattern and self.window < 1:
            bad("local (L) layers need window >= 1")
        for name in ("vocab_size", "seq_len", "dim", "n_layers", "n_heads"):
            if getattr(self, name) < 1:
                bad(f"{name} must be positive")
        for name in DROPOUT_FIELDS:
            if not 0.0 <= getattr(self, name) < 1.0:
                bad(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.vocab_pad_multiple < 0:
            bad(f"vocab_pad_multiple must be >= 0 (0 or 1: no padding), got {self.vocab_pad_multiple}")

    @property
    def uses_dropout(self) -> bool:
        """Whether training draws any dropout mask (the trainer then moves the masks on every step)."""
        return any(getattr(self, name) for name in DROPOUT_FIELDS)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def padded_vocab_size(self) -> int:
        """vocab_size rounded up to a multiple of vocab_pad_multiple (the width of the training logits)."""
        multiple = max(self.vocab_pad_multiple, 1)
        return -(-self.vocab_size // multiple) * multiple

    def layer_window(self, layer: int) -> int | None:
        """The attention window of a layer (None: full causal attention)."""
        if self.attention_pattern and self.attention_pattern[layer] == "L":
            return self.window
        return None

    def is_moe(self, layer: int) -> bool:
        return bool(self.ffn_pattern) and self.ffn_pattern[layer] == "M"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, data: dict) -> "ModelConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise UserError(f"unknown model config fields: {', '.join(sorted(unknown))}")
        return cls(**data)


GPT = dict(norm="layernorm", mlp="gelu", positions="learned", bias=True, tie_embeddings=True)
LLAMA = dict(norm="rmsnorm", norm_eps=1e-6, mlp="swiglu", positions="rope", bias=False, tie_embeddings=False)

PRESETS = {
    # a small model that trains on a laptop CPU in minutes (the quick start's main job)
    "demo": dict(vocab_size=4096, seq_len=128, dim=128, n_layers=4, n_heads=4, **{**LLAMA, "tie_embeddings": True}),
    # the original GradCraft benchmark model: GPT style, about 90M parameters
    "mallmoc": dict(vocab_size=8192, seq_len=512, dim=768, n_layers=11, n_heads=12, **GPT),
    "gpt2-124m": dict(vocab_size=50257, seq_len=1024, dim=768, n_layers=12, n_heads=12, **GPT),
    "gpt2-small": dict(vocab_size=50257, seq_len=1024, dim=768, n_layers=12, n_heads=12, **GPT),
    # LLaMA family, small sizes (the llama2.c TinyStories shapes)
    "llama-15m": dict(vocab_size=32000, seq_len=256, dim=288, n_layers=6, n_heads=6, ffn_dim=768,
                      **{**LLAMA, "tie_embeddings": True}),
    "llama-42m": dict(vocab_size=32000, seq_len=1024, dim=512, n_layers=8, n_heads=8, ffn_dim=1376,
                      **{**LLAMA, "tie_embeddings": True}),
    "llama-110m": dict(vocab_size=32000, seq_len=1024, dim=768, n_layers=12, n_heads=12, ffn_dim=2048,
                       **{**LLAMA, "tie_embeddings": True}),
    # K2 (pstaykov/transformer, docs/k2.md): RMSNorm eps 1e-5, SwiGLU gate * sigmoid(beta * gate) * value with
    # a learned beta per layer, biases in the MLP only, learned positions, untied head; 82.9M parameters
    "k2-83m": dict(vocab_size=32000, seq_len=256, dim=512, n_layers=12, n_heads=8, ffn_dim=2026, learned_beta=True,
                   norm="rmsnorm", norm_eps=1e-5, mlp="swiglu", positions="learned", bias=False, mlp_bias=True,
                   tie_embeddings=False),
    # the v1 "tiny state of the art": hybrid sliding-window/global attention, GQA, MoE (about 99M)
    "toy-v1": dict(vocab_size=32000, seq_len=1024, dim=576, n_layers=14, n_heads=12, n_kv_heads=3, ffn_dim=1536,
                   attention_pattern="LLLGLLLGLLGLLG", window=512, ffn_pattern="DDDDDDMDMDMDMD", n_experts=4,
                   experts_per_token=2, capacity_factor=1.25, **{**LLAMA, "tie_embeddings": True}),
    "toy-v0": dict(vocab_size=8192, seq_len=32, dim=128, n_layers=2, n_heads=4, ffn_dim=256,
                   **{**LLAMA, "tie_embeddings": True}),
}


def preset(name: str, **overrides) -> ModelConfig:
    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r}; choose one of {', '.join(sorted(PRESETS))}")
    values = dict(PRESETS[name])
    values.update({k: v for k, v in overrides.items() if v is not None})
    values.setdefault("extra", {})
    values["extra"] = dict(values["extra"], preset=name)
    return ModelConfig(**values)
