"""K2's checkpoints (pstaykov/transformer, `cuda/include/checkpoint.cuh`): TFCKPT1 read and written.

Layout, little-endian:

    "TFCKPT1\\n"                                               8 bytes
    int32 step, vocab_size, d_model, num_heads, num_layers, d_ff, max_len
    int32 num_params, then per parameter, in K2's fixed order (k2_parameters):
        int32 name length, the name, int64 element count, that many float32

K2's model is our decoder with: RMSNorm (eps 1e-5) before attention and MLP, separate bias-free
Wq/Wk/Wv/Wo, an MLP `hidden` (d_model -> 2 d_ff, with bias; gate = first half, value = second) then
gate * sigmoid(beta * gate) * value with a learned scalar beta per layer, `output` (d_ff -> d_model,
with bias), learned positions, a final RMSNorm and an untied, bias-free output matrix. K2 stores
every matrix as (in, out), row-major: ours are (out, in), so each is transposed on the way.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from gradcraft.errors import UserError
from gradcraft.models.config import ModelConfig, preset

MAGIC = b"TFCKPT1\n"
HEADER_FIELDS = ("step", "vocab_size", "d_model", "num_heads", "num_layers", "d_ff", "max_len")


def k2_parameters(h: dict) -> list[tuple[str, int]]:
    """(name, element count) of every parameter, in the order K2's collect_params walks the model."""
    V, D, F, L, T = h["vocab_size"], h["d_model"], h["d_ff"], h["num_layers"], h["max_len"]
    out = [("embedding.token_emb", V * D), ("embedding.pos_emb", T * D)]
    for i in range(L):
        p = f"blocks.{i}"
        out += [(f"{p}.ln1.gamma", D), (f"{p}.ln2.gamma", D)]
        out += [(f"{p}.attn.{w}.W", D * D) for w in ("Wq", "Wk", "Wv", "Wo")]
        out += [
            (f"{p}.mlp.hidden.W", D * 2 * F),
            (f"{p}.mlp.hidden.b", 2 * F),
            (f"{p}.mlp.swiglu.beta", 1),
            (f"{p}.mlp.output.W", F * D),
            (f"{p}.mlp.output.b", D),
        ]
    return out + [("ln_f.gamma", D), ("W_out.W", D * V)]


def read_tfckpt(path: str) -> tuple[dict, dict]:
    """(header, {K2 name: flat float32 array}) of a TFCKPT1 file, every field and parameter checked."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise UserError(f"checkpoint {path} not found") from None
    except OSError as e:
        raise UserError(f"cannot read checkpoint {path}: {e.strerror}") from None
    if data[:8] != MAGIC:
        raise UserError(
            f"{path} is not a K2 checkpoint (it does not start with TFCKPT1); "
            "give the latest.ckpt K2's CUDA trainer wrote"
        )
    if len(data) < 40:
        raise UserError(f"{path} is truncated: its header needs 40 bytes, the file has {len(data)}; download it again")
    values = struct.unpack_from("<8i", data, 8)
    header = dict(zip(HEADER_FIELDS, values[:7]))
    for name in HEADER_FIELDS[1:]:
        if header[name] < 1:
            raise UserError(f"{path}: header field {name} is {header[name]}; the file is damaged")
    if header["step"] < 0:
        raise UserError(f"{path}: header field step is {header['step']}; the file is damaged")
    if header["d_model"] % header["num_heads"]:
        raise UserError(
            f"{path}: d_model {header['d_model']} is not divisible by num_heads {header['num_heads']}; "
            "the file is damaged"
        )
    expected = k2_parameters(header)
    if values[7] != len(expected):
        raise UserError(
            f"{path} holds {values[7]} parameters but a K2 model of {header['num_layers']} layers has "
            f"{len(expected)}; not a checkpoint of K2's architecture"
        )
    params, pos = {}, 40
    for name, size in expected:
        if pos + 4 > len(data):
            raise UserError(
                f"{path} is truncated before parameter {name} (offset {pos}, file {len(data)} bytes); download it again"
            )
        (name_len,) = struct.unpack_from("<i", data, pos)
        got = data[pos + 4 : pos + 4 + max(name_len, 0)]
        if name_len != len(name.encode()) or got != name.encode():
            raise UserError(
                f"{path}: expected parameter {name} at offset {pos}, found "
                f"{got[:64].decode('utf-8', 'replace')!r}; not a checkpoint of K2's architecture"
            )
        pos += 4 + name_len
        if pos + 8 > len(data):
            raise UserError(f"{path} is truncated in parameter {name}; download it again")
        (count,) = struct.unpack_from("<q", data, pos)
        if count != size:
            raise UserError(
                f"{path}: parameter {name} has {count} values but the header's shape needs {size}; the file is damaged"
            )
        pos += 8
        if pos + 4 * size > len(data):
            raise UserError(
                f"{path} is truncated in parameter {name}: it needs {4 * size} bytes at offset {pos}, "
                f"the file has {len(data) - pos}; download it again"
            )
        params[name] = np.frombuffer(data, dtype="<f4", count=size, offset=pos).astype(np.float32)
        pos += 4 * size
    if pos != len(data):
        raise UserError(f"{path} has {len(data) - pos} bytes after its last parameter; the file is damaged")
    return header, params


def config_from_header(h: dict, dropout: float = 0.1) -> ModelConfig:
    """Our config for a K2 header: the k2-83m preset's architecture at the header's sizes."""
    return preset(
        "k2-83m",
        vocab_size=h["vocab_size"],
        seq_len=h["max_len"],
        dim=h["d_model"],
        n_heads=h["num_heads"],
        n_layers=h["num_layers"],
        ffn_dim=h["d_ff"],
        dropout=dropout,
    )


def check_k2_config(cfg: ModelConfig) -> None:
    """Refuse an architecture K2's model does not compute."""
    k2 = preset("k2-83m")
    same = ("norm", "norm_eps", "mlp", "learned_beta", "positions", "bias", "mlp_bias", "tie_embeddings")
    differ = [f"{n} {getattr(cfg, n)!r} (K2: {getattr(k2, n)!r})" for n in same if getattr(cfg, n) != getattr(k2, n)]
    if cfg.n_kv_heads != cfg.n_heads:
        differ.append("grouped-query attention")
    if cfg.attention_pattern.replace("G", "") or "M" in cfg.ffn_pattern:
        differ.append("sliding-window or mixture-of-experts layers")
    if differ:
        raise UserError(f"K2's model cannot hold this architecture: {', '.join(differ)}")


def state_from_k2(h: dict, p: dict) -> dict:
    """Our state dict (parameter name -> array) from K2's parameters."""
    V, D, F, T = h["vocab_size"], h["d_model"], h["d_ff"], h["max_len"]

    def mat(name, rows, cols):  # K2's (in, out) -> our (out, in)
        return np.ascontiguousarray(p[name].reshape(rows, cols).T)

    state = {
        "tok_emb.weight": p["embedding.token_emb"].reshape(V, D),
        "pos_emb.weight": p["embedding.pos_emb"].reshape(T, D),
        "norm.weight": p["ln_f.gamma"],
        "lm_head.weight": mat("W_out.W", D, V),
    }
    for i in range(h["num_layers"]):
        k = f"blocks.{i}"  # the same prefix on both sides
        state[f"{k}.norm1.weight"] = p[f"{k}.ln1.gamma"]
        state[f"{k}.norm2.weight"] = p[f"{k}.ln2.gamma"]
        state[f"{k}.attn.qkv.weight"] = np.concatenate([mat(f"{k}.attn.{w}.W", D, D) for w in ("Wq", "Wk", "Wv")])
        state[f"{k}.attn.proj.weight"] = mat(f"{k}.attn.Wo.W", D, D)
        state[f"{k}.mlp.fc.weight"] = mat(f"{k}.mlp.hidden.W", D, 2 * F)
        state[f"{k}.mlp.fc.bias"] = p[f"{k}.mlp.hidden.b"]
        state[f"{k}.mlp.beta"] = p[f"{k}.mlp.swiglu.beta"]
        state[f"{k}.mlp.proj.weight"] = mat(f"{k}.mlp.output.W", F, D)
        state[f"{k}.mlp.proj.bias"] = p[f"{k}.mlp.output.b"]
    return state


def k2_from_state(cfg: ModelConfig, state: dict) -> list[tuple[str, np.ndarray]]:
    """K2's (name, flat float32) list, in K2's order, from our state dict."""
    check_k2_config(cfg)
    D = cfg.dim

    def f32(name):
        return np.asarray(state[name], dtype=np.float32)

    out = {
        "embedding.token_emb": f32("tok_emb.weight"),
        "embedding.pos_emb": f32("pos_emb.weight"),
        "ln_f.gamma": f32("norm.weight"),
        "W_out.W": f32("lm_head.weight").T,
    }
    for i in range(cfg.n_layers):
        k = f"blocks.{i}"
        qkv = f32(f"{k}.attn.qkv.weight")
        out.update(
            {
                f"{k}.ln1.gamma": f32(f"{k}.norm1.weight"),
                f"{k}.ln2.gamma": f32(f"{k}.norm2.weight"),
                f"{k}.attn.Wq.W": qkv[:D].T,
                f"{k}.attn.Wk.W": qkv[D : 2 * D].T,
                f"{k}.attn.Wv.W": qkv[2 * D :].T,
                f"{k}.attn.Wo.W": f32(f"{k}.attn.proj.weight").T,
                f"{k}.mlp.hidden.W": f32(f"{k}.mlp.fc.weight").T,
                f"{k}.mlp.hidden.b": f32(f"{k}.mlp.fc.bias"),
                f"{k}.mlp.swiglu.beta": f32(f"{k}.mlp.beta"),
                f"{k}.mlp.output.W": f32(f"{k}.mlp.proj.weight").T,
                f"{k}.mlp.output.b": f32(f"{k}.mlp.proj.bias"),
            }
        )
    header = header_of(cfg, 0)
    return [(name, np.ascontiguousarray(out[name]).reshape(-1)) for name, _ in k2_parameters(header)]


def header_of(cfg: ModelConfig, step: int) -> dict:
    return {
        "step": step,
        "vocab_size": cfg.vocab_size,
        "d_model": cfg.dim,
        "num_heads": cfg.n_heads,
        "num_layers": cfg.n_layers,
        "d_ff": cfg.ffn_dim,
        "max_len": cfg.seq_len,
    }


def tfckpt_bytes(cfg: ModelConfig, state: dict, step: int) -> bytes:
    """A TFCKPT1 file of our weights, as K2's save_checkpoint writes it."""
    params = k2_from_state(cfg, state)
    h = header_of(cfg, step)
    out = [MAGIC, struct.pack("<8i", *(h[n] for n in HEADER_FIELDS), len(params))]
    for name, values in params:
        raw = name.encode()
        out += [struct.pack("<i", len(raw)), raw, struct.pack("<q", values.size), values.astype("<f4").tobytes()]
    return b"".join(out)


def write_tfckpt(path: str, cfg: ModelConfig, state: dict, step: int) -> None:
    from gradcraft.atomic import write_bytes

    if os.path.isdir(path):
        raise UserError(f"{path} is a folder; give the checkpoint file to write")
    write_bytes(path, tfckpt_bytes(cfg, state, step))


def export_k2(model, tokenizer, step: int, out: str) -> list:
    """K2's files into the folder `out`: latest.ckpt, and tokenizer.bbpe + vocab.json + merges.txt when
    the tokenizer is K2's (K2 cannot run another pre-tokenizer). Returns the names written."""
    from gradcraft.tokenizer.k2 import is_k2_tokenizer, write_k2_tokenizer

    check_k2_config(model.config)
    if tokenizer is not None and tokenizer.vocab_size > model.config.vocab_size:
        raise UserError(
            f"the tokenizer has {tokenizer.vocab_size} ids, more than the model's {model.config.vocab_size}"
        )
    os.makedirs(out, exist_ok=True)
    state = {name: t.numpy() for name, t in model.state_dict().items()}
    write_tfckpt(os.path.join(out, "latest.ckpt"), model.config, state, step)
    written = ["latest.ckpt"]
    if tokenizer is not None and is_k2_tokenizer(tokenizer):
        written += write_k2_tokenizer(tokenizer, out)
    elif tokenizer is not None:
        print(
            "note: the run's tokenizer is not K2's (another pre-tokenizer or id layout); K2's files cannot hold "
            "it, so only latest.ckpt was written"
        )
    return written
