"""One spec per op: every kernel of the backend contract, declared once.

An `OpSpec` is the op's name (a str: graph nodes, kernel tables and plans key on it, so the engine
and the backends see the plain name) carrying what else the op is:

- `optional`: a fused kernel a backend may leave out (else a primitive every backend has);
- `backward`: the fused backward kernels an optional forward kernel comes with (a backend that has
  the forward kernel has them too);
- `writes`: the inputs the kernel writes in place (all others are only read);
- `gate`: the Backend method that says where the kernel is the fast way; the op layer asks it
  before it builds the node, so such a kernel needs no fallback;
- `view`: the kernel returns a view of its input where the layout allows (an in-place write to
  the base is seen through it: gradcraft/ops/inplace.py);
- `method` / `out`: the op's torch.* function is also a Tensor method / takes PyTorch's out=;
- `torch_node`: PyTorch's name of the op's backward node (Tensor.grad_fn), where it is not
  the name's title case + "Backward0".

The op layer, above this one, attaches what is written in Tensor ops, next to the op's forward:
its gradient rule (`@gradient(SPEC)`, gradcraft/ops/function.py), its composite fallback for a
backend without the kernel (`@SPEC.fallback`) and its torch.* function (`@SPEC.function`).

From these specs come the contract (backend/__init__.py: PRIMITIVES, OPTIONAL_PAIRS), the engine's
WRITES_INPUTS, the op layer's fallback table (ops/fallback.py: FALLBACKS, CAPABILITY_GATED), its
VIEW_OPS (ops/function.py), the grad_fn names (ops/grad_fn.py), the Tensor methods and out=
functions an op declares, and the contract's tests (tests/test_opspec.py).
Backward kernels have specs of their own (a fused backward is a kernel like any other); `backward=`
names them from the forward's spec.

Each spec is a module constant in upper case, which the ops name through this module
(`from gradcraft.backend import opspec`): `apply(opspec.RMS_NORM, ...)` can be followed here from an
editor.
docs/design.md ("Adding an op") walks through adding one.
"""

SPECS: dict = {}  # name -> OpSpec, in declaration order


class OpSpec(str):
    """An op of the contract: its name, with the declaration's fields as attributes (see the module)."""

    def __new__(
        cls,
        name,
        *,
        optional=False,
        backward=(),
        writes=(),
        gate=None,
        view=False,
        method=False,
        out=False,
        torch_node=None,
    ):
        if name in SPECS:
            raise ValueError(f"op {name!r} is declared twice")
        self = super().__new__(cls, name)
        self.name, self.optional, self.backward, self.writes = name, optional, tuple(backward), tuple(writes)
        self.gate, self.view, self.method, self.out = gate, view, method, out
        self.torch_node = torch_node or "".join(part.title() for part in name.split("_")) + "Backward0"
        self.backward_of = None  # the forward op's spec, for a fused backward kernel
        self.grad_rule = self.composite = self.torch_function = None  # attached by the op layer
        SPECS[name] = self
        return self

    def __reduce__(self):  # pickled as the spec of its name (one object per op)
        return (spec_named, (self.name,))

    def fallback(self, fn):
        """Decorator: fn(*inputs, **attrs) computes what the kernel would, from Tensor ops (for a
        backend without the kernel; its gradient then follows the primitives' rules)."""
        self.composite = fn
        return fn

    def function(self, fn):
        """Decorator: fn is the op's torch.* function (the Tensor method and out= come from it)."""
        self.torch_function = fn
        return fn


def spec_named(name: str) -> OpSpec:
    return SPECS[name]


def primitive(name, **fields) -> OpSpec:
    return OpSpec(name, **fields)


def optional(name, backward=(), **fields) -> OpSpec:
    """An optional fused kernel; `backward`: the specs of its fused backward kernels (declared just
    before it with `optional(...)`: a backend that has the forward kernel must have them)."""
    spec = OpSpec(name, optional=True, backward=backward, **fields)
    for b in backward:
        b.backward_of = spec
    return spec


# ---- elementwise unary (a) -> same shape
NEG = primitive("neg")
EXP = primitive("exp")
LOG = primitive("log")
SQRT = primitive("sqrt")
RSQRT = primitive("rsqrt")
ABS = primitive("abs")
SIN = primitive("sin")
COS = primitive("cos")
TANH = primitive("tanh")
SIGMOID = primitive("sigmoid")
RELU = primitive("relu")
SIGN = primitive("sign")
LOGICAL_NOT = primitive("logical_not")
CAST = primitive("cast", torch_node="ToCopyBackward0")
# inverse trigonometric and hyperbolic functions (their gradients: gradcraft/ops/trig.py)
ASIN = primitive("asin", method=True, out=True)
ACOS = primitive("acos", method=True, out=True)
ATAN = primitive("atan", method=True, out=True)
ASINH = primitive("asinh", method=True, out=True)
ACOSH = primitive("acosh", method=True, out=True)
ATANH = primitive("atanh", method=True, out=True)
# ---- elementwise binary (a, b) with NumPy broadcasting
ADD = primitive("add")
SUB = primitive("sub")
MUL = primitive("mul")
DIV = primitive("div")
POW = primitive("pow")
MAXIMUM = primitive("maximum")
MINIMUM = primitive("minimum")
EQ = primitive("eq")
NE = primitive("ne")
LT = primitive("lt")
LE = primitive("le")
GT = primitive("gt")
GE = primitive("ge")
WHERE = primitive("where")
ATAN2 = primitive("atan2", method=True, out=True)  # atan2(a, b): the angle of the point (b, a)
# ---- reductions over `axes` with `keepdim`
SUM = primitive("sum", torch_node="SumBackward1")
MAX = primitive("max", torch_node="MaxBackward1")
MIN = primitive("min", torch_node="MinBackward1")
ARGMAX = primitive("argmax")
ARGMIN = primitive("argmin")
# (logits (B, V), ids (B elements), position (1 or B)) -> (B,) argmax; writes it into ids, position + 1
# (a decoding step that feeds itself)
GREEDY_ADVANCE = primitive("greedy_advance", writes=(1, 2))
CUMSUM = primitive("cumsum")
TOPK = primitive("topk")
# ---- matrix product with batch broadcasting
MATMUL = primitive("matmul", torch_node="MmBackward0")
# ---- matrices over the last two axes, batched (gradcraft/ops/linalg_solve.py)
LINALG_INV = primitive("linalg_inv", torch_node="LinalgInvExBackward0")  # caller: the name errors give
LINALG_SLOGDET = primitive("linalg_slogdet")  # (..., 2): sign and log|det| side by side
LINALG_CHOLESKY = primitive("linalg_cholesky", torch_node="LinalgCholeskyExBackward0")
# ---- movement: views where the layout allows
RESHAPE = primitive("reshape", view=True, torch_node="ViewBackward0")
PERMUTE = primitive("permute", view=True)
EXPAND = primitive("expand", view=True)
SLICE = primitive("slice", view=True)
FLIP = primitive("flip")
CONTIGUOUS = primitive("contiguous", torch_node="CloneBackward0")
# ---- gathers and their scatter-add gradients
INDEX = primitive("index")
INDEX_PUT_ADD = primitive("index_put_add")
TAKE_ALONG_DIM = primitive("take_along_dim", torch_node="GatherBackward0")
SCATTER_ADD_ALONG_DIM = primitive("scatter_add_along_dim")
CAT = primitive("cat")
PAD = primitive("pad")
TRIL = primitive("tril")
TRIU = primitive("triu")
PUT_SLICES = primitive("put_slices")  # (*gs, specs, shape): zeros with each g added at its slices (slicing's gradient)
# ---- creation
FULL = primitive("full")
ARANGE = primitive("arange")
RAND = primitive("rand")
RANDN = primitive("randn")
RANDINT = primitive("randint")
COPY_FROM = primitive("copy_from")
# writes into its first argument: all of it; or, with an `index` input of (B,) or (1,) positions and
# a `dim`, a value of size 1 along `dim` into slot index[b] % L of each leading row b (a decoding
# step's KV-cache write)
ASSIGN = primitive("assign", writes=(0,))
# ---- random masks that must match across devices bit for bit (Philox): not composable from rand
DROPOUT = primitive("dropout")
ATTENTION_DROPOUT = primitive("attention_dropout")  # (weights, state), backend/philox.py's mask (explicit path)
# ---- mixture of experts: tokens to their experts' rows and back; slot (N, k) gives each assignment's row
MOE_PERMUTE = primitive("moe_permute")
MOE_PERMUTE_BACKWARD = primitive("moe_permute_backward")
MOE_UNPERMUTE = primitive("moe_unpermute")
MOE_UNPERMUTE_BACKWARD = primitive("moe_unpermute_backward")  # unpermute bwd: (dy, dw)
# (a, *others) -> a, the others only read: the node of a user-defined autograd Function
# (gradcraft/ops/custom.py), whose gradient rule is the user's backward
PASSTHROUGH = primitive("passthrough")

# ---- optional fused kernels (ops/fallback.py composes each from primitives, unless gated)
# torch.logaddexp (a, b) -> log(exp(a) + exp(b)), broadcasting; its fallback: ops/elementwise.py
LOGADDEXP = optional("logaddexp", method=True, out=True)
# torch.sinh / cosh / hypot; their fallbacks (from exp, expm1, sqrt): ops/trig.py
SINH = optional("sinh", method=True, out=True)
COSH = optional("cosh", method=True, out=True)
HYPOT = optional("hypot", method=True, out=True)
GELU_BACKWARD = optional("gelu_backward")
GELU = optional("gelu", (GELU_BACKWARD,))
SILU_BACKWARD = optional("silu_backward")
SILU = optional("silu", (SILU_BACKWARD,))
# SwiGLU: (h) -> silu(h[..., :F]) * h[..., F:] for h of 2F features; backward (h, g) -> dh
SWIGLU_BACKWARD = optional("swiglu_backward")
SWIGLU = optional("swiglu", (SWIGLU_BACKWARD,))
SOFTMAX_BACKWARD = optional("softmax_backward")
SOFTMAX = optional("softmax", (SOFTMAX_BACKWARD,))
LOG_SOFTMAX_BACKWARD = optional("log_softmax_backward")
LOG_SOFTMAX = optional("log_softmax", (LOG_SOFTMAX_BACKWARD,))
CROSS_ENTROPY_BACKWARD = optional("cross_entropy_backward")
CROSS_ENTROPY = optional("cross_entropy", (CROSS_ENTROPY_BACKWARD,), torch_node="NllLossBackward0")
# (multi) (x, w, target) -> (sum of the rows' losses, dx, dw): logits never whole
LINEAR_CROSS_ENTROPY = optional("linear_cross_entropy", gate="fused_linear_cross_entropy")
LAYER_NORM_BACKWARD = optional("layer_norm_backward")
LAYER_NORM = optional(
    "layer_norm", (LAYER_NORM_BACKWARD,), torch_node="NativeLayerNormBackward0"
)  # backward (multi): dx, dweight, dbias
RMS_NORM_BACKWARD = optional("rms_norm_backward")
RMS_NORM = optional("rms_norm", (RMS_NORM_BACKWARD,))  # backward (multi): dx, dweight
EMBEDDING_BACKWARD = optional("embedding_backward")
EMBEDDING = optional("embedding", (EMBEDDING_BACKWARD,))
ROPE = optional("rope")  # (rope's gradient is rope with the inverse angle)
SDPA_BACKWARD = optional("sdpa_backward")
SDPA = optional(
    "sdpa", (SDPA_BACKWARD,), torch_node="ScaledDotProductAttentionBackward0"
)  # backward (multi): dq, dk, dv
# flash attention (multi): (q, k, v[, dropout state]) -> (out, log-sum-exp per query);
# backward (q, k, v, out, lse, g[, state]) -> dq, dk, dv
FLASH_ATTENTION_BACKWARD = optional("flash_attention_backward")
FLASH_ATTENTION = optional(
    "flash_attention",
    (FLASH_ATTENTION_BACKWARD,),
    gate="flash_attention_supported",
    torch_node="ScaledDotProductFlashAttentionBackward0",
)
MASKED_SOFTMAX_BACKWARD = optional("masked_softmax_backward")
MASKED_SOFTMAX = optional("masked_softmax", (MASKED_SOFTMAX_BACKWARD,))  # attention weights (explicit attention)
# decoding through fixed KV caches (inference only, no gradient): (q, k_cache, v_cache, position;
# scale) -> each row's query against the first min(position + 1, L) slots (backend/cpu/kv_cache.py)
KV_ATTENTION = optional("kv_attention", gate="kv_attention_supported")
# the same after writing this step's keys/values (rotated first, as the query, where cos/sin come):
# (q, k_cache, v_cache, position, key, value[, cos, sin]; scale, rotary) -> out; key and value
# (B, Hkv, 1, D) go to slot position % L of the caches, in place (as flash_attn_with_kvcache does)
KV_APPEND_ATTENTION = optional("kv_append_attention", writes=(1, 2), gate="kv_append_supported")
# (logits (B, V), temperature, top_k, top_p, uniform) -> (B,) token ids drawn as gradcraft/sampling.py
# defines (inference only); -1 marks a row the kernel cannot hold (backend/cpu/sampling.py)
SAMPLE_TOKENS = optional("sample_tokens")
# a decoding step's one-row products with what surrounds them (inference only): (x[, residual]
# [, norm weight][, norm bias], weight[, bias]; residual, norm, eps, norm_bias, bias, activation)
# -> y, or (y, x + residual) with a residual (backend/cpu/gemv.py, kernels/gemv.cu)
NORM_LINEAR = optional("norm_linear", gate="norm_linear_supported")
# a product with its bias (training-sized rows): (x (M, K), w (N, K), b (N,)) -> x @ w^T + b;
# backward (g (M, N), x) -> (dw = g^T @ x, db = g summed over rows); dx is a matmul
# (backend/cpu/linear.py; cuBLASLt's bias epilogues on a GPU)
LINEAR_BIAS_BACKWARD = optional("linear_bias_backward")
LINEAR_BIAS = optional("linear_bias", (LINEAR_BIAS_BACKWARD,), gate="fused_linear_bias", torch_node="AddmmBackward0")
