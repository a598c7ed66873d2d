"""The decoder configuration (one dataclass for every family) and the named presets."""

import dataclasses
import json
from dataclasses import dataclass

from gradcraft.errors import ConfigError, UserError
from gradcraft.validation import (
    Value,
    field_values,
    fraction,
    non_negative_float,
    non_negative_int,
    positive_int,
    setting,
)


DROPOUT_FIELDS = ("dropout", "attn_dropout", "resid_dropout", "embd_dropout")


@dataclass
class ModelConfig:
    """A decoder's architecture. Each field's help text and range are its metadata (`setting`): the
    `train` flags, the --config file and the saved gradcraft_config.json are all checked against them."""

    vocab_size: int = setting(
        8192, value=positive_int, help="must equal the dataset's vocabulary (default: taken from it)"
    )
    # The training matmuls of the output layer run over a vocabulary padded with zero rows to a
    # multiple of this (gpt2's 50257 -> 50304): cuBLAS picks much slower kernels for an odd size.
    # Invisible outside the loss: logits, weights, checkpoints and tokenizers keep vocab_size.
    vocab_pad_multiple: int = setting(
        64,
        value=non_negative_int,
        help="the output layer's training matmuls run over a vocabulary padded to a "
        "multiple of this (0 or 1: no padding)",
    )
    seq_len: int = setting(256, value=positive_int, help="context length in tokens")
    dim: int = setting(256, value=positive_int, aliases=("embed_dim",), help="model width")
    n_layers: int = setting(4, value=positive_int, aliases=("num_layers",), help="transformer blocks")
    n_heads: int = setting(4, value=positive_int, aliases=("num_heads",), help="attention heads")
    n_kv_heads: int | None = setting(
        None,
        value=positive_int,
        aliases=("num_kv_heads",),
        help="key/value heads (< n_heads: grouped-query attention; default: n_heads)",
    )
    ffn_dim: int | None = setting(
        None,
        value=positive_int,
        help="MLP hidden width (default: 4 x dim for gelu, 8/3 x dim rounded up to 64 for swiglu)",
    )
    norm: str = setting("layernorm", value=Value(str, choices=("layernorm", "rmsnorm")), help="normalization layer")
    norm_eps: float = setting(1e-5, value=Value(float, low=0, low_open=True), help="epsilon of the norms")
    mlp: str = setting("gelu", value=Value(str, choices=("gelu", "swiglu")), help="MLP kind")
    gelu_approximate: str = setting(
        "tanh",
        value=Value(str, choices=("tanh", "none")),
        help="GELU form: tanh (GPT-2's gelu_new) or none (the erf form)",
    )
    learned_beta: bool = setting(False, help="SwiGLU with a learned Swish beta per layer: x * sigmoid(beta * x)")
    positions: str = setting("learned", value=Value(str, choices=("learned", "rope")), help="position encoding")
    rope_base: float = setting(10000.0, value=Value(float, low=0, low_open=True), help="RoPE frequency base")
    bias: bool = setting(True, help="biases in the linear layers and norms")
    mlp_bias: bool | None = setting(None, help="biases in the MLP's two linears (default: bias)")
    tie_embeddings: bool = setting(True, help="the output layer shares the token embedding's weights")
    # Dropout probabilities, where GPT-2 and nanoGPT put them: after the embeddings (embd), on the
    # attention weights (attn) and on the residual branch after each attention/MLP output projection
    # (resid). Each of the three defaults (None) to `dropout`. `model.eval()` turns all off.
    dropout: float = setting(0.0, value=fraction, help="dropout probability")
    attn_dropout: float | None = setting(
        None, value=fraction, help="dropout probability on the attention weights (default: dropout)"
    )
    resid_dropout: float | None = setting(
        None,
        value=fraction,
        help="dropout probability on the residual branch after each attention/MLP projection (default: dropout)",
    )
    embd_dropout: float | None = setting(
        None, value=fraction, help="dropout probability after the embeddings (default: dropout)"
    )
    init_std: float = setting(0.02, value=non_negative_float, help="standard deviation of the initial weights")
    attention_pattern: str = setting("", help="per layer, L (local, sliding window) or G (global); empty: all global")
    window: int = setting(0, value=non_negative_int, help="sliding-window size of local (L) layers")
    ffn_pattern: str = setting("", help="per layer, D (dense) or M (mixture of experts); empty: all dense")
    n_experts: int = setting(4, value=positive_int, help="experts of each mixture-of-experts layer")
    experts_per_token: int = setting(2, value=positive_int, help="experts each token is routed to")
    capacity_factor: float | None = setting(
        1.25, value=non_negative_float, help="expert capacity, in tokens per expert over the even share (0: no limit)"
    )
    moe_balance: float = setting(0.01, value=non_negative_float, resumable=True, help="load-balancing loss coefficient")
    moe_zloss: float = setting(0.001, value=non_negative_float, resumable=True, help="router z-loss coefficient")
    extra: dict = setting(default_factory=dict, flag=False, help="free-form notes (e.g. the preset name)")

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
        """Each field in its range (the metadata's), then the checks across fields. A ConfigError
        names the fields."""

        def bad(msg, *fields):
            raise ConfigError(f"invalid model config: {msg}", fields)

        for name, value in field_values(ModelConfig).items():
            problem = value.problem(getattr(self, name))
            if problem is not None:
                bad(f"{name} {problem}", name)
        if self.dim % self.n_heads:
            bad(f"dim {self.dim} is not divisible by n_heads {self.n_heads}", "dim", "n_heads")
        if self.n_heads % self.n_kv_heads:
            bad(f"n_heads {self.n_heads} is not divisible by n_kv_heads {self.n_kv_heads}", "n_heads", "n_kv_heads")
        if self.positions == "rope" and self.head_dim % 2:
            bad(f"RoPE needs an even head dimension (dim / n_heads), got {self.head_dim}", "dim", "n_heads")
        if self.attention_pattern and (
            set(self.attention_pattern) - {"L", "G"} or len(self.attention_pattern) != self.n_layers
        ):
            bad(
                f"attention_pattern must have one L or G per layer ({self.n_layers}), got {self.attention_pattern!r}",
                "attention_pattern",
                "n_layers",
            )
        if self.ffn_pattern and (set(self.ffn_pattern) - {"D", "M"} or len(self.ffn_pattern) != self.n_layers):
            bad(
                f"ffn_pattern must have one D or M per layer ({self.n_layers}), got {self.ffn_pattern!r}",
                "ffn_pattern",
                "n_layers",
            )
        if "M" in self.ffn_pattern and not 1 <= self.experts_per_token <= self.n_experts:
            bad(
                f"experts_per_token must be between 1 and n_experts ({self.n_experts})",
                "experts_per_token",
                "n_experts",
            )
        if "M" in self.ffn_pattern and self.mlp != "swiglu":
            bad("mixture-of-experts layers use SwiGLU experts: set mlp to swiglu", "mlp")
        if "L" in self.attention_pattern and self.window < 1:
            bad("local (L) layers need window >= 1", "window")

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
LLAMA_TIED = {**LLAMA, "tie_embeddings": True}  # llama2.c's small shapes: the head is the embedding
# K2 (pstaykov/transformer, docs/k2.md): LLaMA's blocks with RMSNorm eps 1e-5, SwiGLU gate * sigmoid(beta * gate)
# * value with a learned beta per layer, biases in the MLP only, learned positions, untied head
K2 = {**LLAMA, "norm_eps": 1e-5, "positions": "learned", "learned_beta": True, "mlp_bias": True}

PRESETS = {
    # a small model that trains on a laptop CPU in minutes (the quick start's main job)
    "demo": dict(vocab_size=4096, seq_len=128, dim=128, n_layers=4, n_heads=4, **LLAMA_TIED),
    # the original GradCraft benchmark model: GPT style, about 90M parameters
    "mallmoc": dict(vocab_size=8192, seq_len=512, dim=768, n_layers=11, n_heads=12, **GPT),
    "gpt2-124m": dict(vocab_size=50257, seq_len=1024, dim=768, n_layers=12, n_heads=12, **GPT),
    "gpt2-small": dict(vocab_size=50257, seq_len=1024, dim=768, n_layers=12, n_heads=12, **GPT),
    # LLaMA family, small sizes (the llama2.c TinyStories shapes)
    "llama-15m": dict(vocab_size=32000, seq_len=256, dim=288, n_layers=6, n_heads=6, ffn_dim=768, **LLAMA_TIED),
    "llama-42m": dict(vocab_size=32000, seq_len=1024, dim=512, n_layers=8, n_heads=8, ffn_dim=1376, **LLAMA_TIED),
    "llama-110m": dict(vocab_size=32000, seq_len=1024, dim=768, n_layers=12, n_heads=12, ffn_dim=2048, **LLAMA_TIED),
    # K2's model (82.9M parameters)
    "k2-83m": dict(vocab_size=32000, seq_len=256, dim=512, n_layers=12, n_heads=8, ffn_dim=2026, **K2),
    # the v1 "tiny state of the art": hybrid sliding-window/global attention, GQA, MoE (about 99M)
    "toy-v1": dict(
        vocab_size=32000,
        seq_len=1024,
        dim=576,
        n_layers=14,
        n_heads=12,
        n_kv_heads=3,
        ffn_dim=1536,
        attention_pattern="LLLGLLLGLLGLLG",
        window=512,
        ffn_pattern="DDDDDDMDMDMDMD",
        n_experts=4,
        experts_per_token=2,
        capacity_factor=1.25,
        **LLAMA_TIED,
    ),
    "toy-v0": dict(vocab_size=8192, seq_len=32, dim=128, n_layers=2, n_heads=4, ffn_dim=256, **LLAMA_TIED),
}


def preset(name: str, **overrides) -> ModelConfig:
    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r}; choose one of {', '.join(sorted(PRESETS))}")
    values = dict(PRESETS[name])
    values.update({k: v for k, v in overrides.items() if v is not None})
    values.setdefault("extra", {})
    values["extra"] = dict(values["extra"], preset=name)
    return ModelConfig(**values)
