"""Test-side K2 (pstaykov/transformer), written from its sources independently of gradcraft's code:
writers of its files (TFCKPT1 checkpoint, tokenizer.bbpe, vocab.json, merges.txt, following its C++
writers), its tokenizer's encoding (specials, pre-tokenizer, BPE, following bpe_model.cpp and
pretokenizer.cpp), and its model's forward pass in NumPy (following model.py and utils/*.py)."""

import struct

import numpy as np

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]


# ------------------------------------------------------------------ tokenizer: unicode_utils.cpp
def decode_utf8(t: bytes, pos: int):
    if pos >= len(t):
        return 0, 0

    def u(off):
        if pos + off >= len(t):
            return -1
        c = t[pos + off]
        return c & 0x3F if (c & 0xC0) == 0x80 else -1

    c0 = t[pos]
    if c0 < 0x80:
        return c0, 1
    if (c0 & 0xE0) == 0xC0:
        c1 = u(1)
        return (c0, 1) if c1 < 0 else (((c0 & 0x1F) << 6) | c1, 2)
    if (c0 & 0xF0) == 0xE0:
        c1, c2 = u(1), u(2)
        return (c0, 1) if c1 < 0 or c2 < 0 else (((c0 & 0x0F) << 12) | (c1 << 6) | c2, 3)
    if (c0 & 0xF8) == 0xF0:
        c1, c2, c3 = u(1), u(2), u(3)
        return (c0, 1) if min(c1, c2, c3) < 0 else (((c0 & 0x07) << 18) | (c1 << 12) | (c2 << 6) | c3, 4)
    return c0, 1


def is_whitespace(cp):
    return (
        cp in (0x20, 0x09, 0x0A, 0x0D, 0x0B, 0x0C, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000)
        or 0x2000 <= cp <= 0x200A
    )


def is_number(cp):
    return 0x30 <= cp <= 0x39 or 0xFF10 <= cp <= 0xFF19


def is_letter(cp):
    ranges = [
        (0x61, 0x7A),
        (0x41, 0x5A),
        (0xAA, 0x2AF),
        (0x370, 0x4FF),
        (0x590, 0x8FF),
        (0x900, 0xDFF),
        (0x1E00, 0x1EFF),
        (0x3040, 0x30FF),
        (0x3400, 0x9FFF),
        (0xAC00, 0xD7A3),
        (0xF900, 0xFAFF),
    ]
    return any(a <= cp <= b for a, b in ranges)


# ------------------------------------------------------------------ tokenizer: pretokenizer.cpp
def pretokenize(text: bytes) -> list:
    pieces, n, i = [], len(text), 0
    while i < n:
        cp, ln = decode_utf8(text, i)
        if text[i] == 0x27 and i + 1 < n:
            ncp, nln = decode_utf8(text, i + 1)
            if is_letter(ncp):
                j = i + 1 + nln
                if j < n:
                    acp, aln = decode_utf8(text, j)
                    if is_letter(acp):
                        j += aln
                pieces.append(text[i:j])
                i = j
                continue
        if is_letter(cp):
            j = i + ln
            while j < n:
                c, l = decode_utf8(text, j)
                if not is_letter(c):
                    break
                j += l
            pieces.append(text[i:j])
            i = j
            continue
        if is_number(cp):
            j, count = i + ln, 1
            while j < n and count < 3:
                c, l = decode_utf8(text, j)
                if not is_number(c):
                    break
                j += l
                count += 1
            pieces.append(text[i:j])
            i = j
            continue
        if is_whitespace(cp):
            j = i + ln
            while j < n:
                c, l = decode_utf8(text, j)
                if not is_whitespace(c):
                    break
                j += l
            if j < n:
                prev = curr = i
                while curr < j:
                    _, l = decode_utf8(text, curr)
                    prev, curr = curr, curr + l
                if prev > i:
                    j = prev
            pieces.append(text[i:j])
            i = j
            continue
        pieces.append(text[i : i + ln])
        i += ln
    return pieces


# ------------------------------------------------------------------ tokenizer: bpe_model.cpp
class RefTokenizer:
    def __init__(self, merges, specials):
        self.merges, self.specials = list(merges), dict(specials)  # specials: {text: id}
        self.tokens = [bytes([b]) for b in range(256)]
        self.pair_id = {}
        for a, b in self.merges:
            self.pair_id[(a, b)] = len(self.tokens)
            self.tokens.append(self.tokens[a] + self.tokens[b])
        self.by_len = sorted(self.specials, key=len, reverse=True)

    def encode_word(self, wb: bytes) -> list:
        ids = list(wb)
        while len(ids) > 1:
            best_id, best_pos = -1, -1
            for i in range(len(ids) - 1):
                t = self.pair_id.get((ids[i], ids[i + 1]))
                if t is not None and (best_pos == -1 or t < best_id):
                    best_id, best_pos = t, i
            if best_pos == -1:
                break
            ids[best_pos : best_pos + 2] = [best_id]
        return ids

    def encode(self, text: bytes) -> list:
        out, i, start = [], 0, 0
        specials = [s.encode() for s in self.by_len]

        def segment(seg):
            for piece in pretokenize(seg):
                out.extend(self.encode_word(piece))

        while i < len(text):
            match = next((s for s in specials if text[i : i + len(s)] == s), None)
            if match:
                if i > start:
                    segment(text[start:i])
                out.append(self.specials[match.decode()])
                i += len(match)
                start = i
            else:
                i += 1
        if start < len(text):
            segment(text[start:])
        return out


def train_merges(corpus: bytes, n_merges: int) -> list:
    """A plain BPE over K2's pieces (most frequent pair, ties to the smallest pair): merges for fixtures."""
    words = {}
    for piece in pretokenize(corpus):
        words[tuple(piece)] = words.get(tuple(piece), 0) + 1
    merges, next_id = [], 256
    for _ in range(n_merges):
        counts = {}
        for w, c in words.items():
            for p in zip(w, w[1:]):
                counts[p] = counts.get(p, 0) + c
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))
        merges.append(pair)
        new_words = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == pair:
                    out.append(next_id)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + c
        words, next_id = new_words, next_id + 1
    return merges


def bbpe_file(merges, specials) -> bytes:
    out = b"BBPEV1\0\0" + struct.pack("<I", len(merges))
    out += b"".join(struct.pack("<II", a, b) for a, b in merges)
    out += struct.pack("<I", len(specials))
    for text, i in sorted(specials.items(), key=lambda x: x[1]):
        out += struct.pack("<II", i, len(text.encode())) + text.encode()
    return out


def _printable_table():
    pr = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    t, nxt = {}, 256
    for b in range(256):
        if b in pr:
            t[b] = chr(b)
        else:
            t[b] = chr(nxt)
            nxt += 1
    return t


def human_readable(merges) -> tuple:
    """(vocab.json, merges.txt) text, as export_human_readable writes them."""
    table = _printable_table()
    tok = RefTokenizer(merges, {})

    def printable(b):
        return "".join(table[x] for x in b).replace("\\", "\\\\").replace('"', '\\"')

    lines = [f'  "{printable(t)}": {i}' for i, t in enumerate(tok.tokens)]
    vocab = "{\n" + ",\n".join(lines) + "\n}\n"
    merges_txt = "#version: 0.2\n" + "".join(
        f"{''.join(table[x] for x in tok.tokens[a])} {''.join(table[x] for x in tok.tokens[b])}\n" for a, b in merges
    )
    return vocab, merges_txt


# ------------------------------------------------------------------ checkpoint: checkpoint.cuh
def param_list(h):
    V, D, F, L, T = h["vocab_size"], h["d_model"], h["d_ff"], h["num_layers"], h["max_len"]
    out = [("embedding.token_emb", (V, D)), ("embedding.pos_emb", (T, D))]
    for i in range(L):
        p = f"blocks.{i}"
        out += [(f"{p}.ln1.gamma", (D,)), (f"{p}.ln2.gamma", (D,))]
        out += [(f"{p}.attn.{w}.W", (D, D)) for w in ("Wq", "Wk", "Wv", "Wo")]
        out += [
            (f"{p}.mlp.hidden.W", (D, 2 * F)),
            (f"{p}.mlp.hidden.b", (2 * F,)),
            (f"{p}.mlp.swiglu.beta", (1,)),
            (f"{p}.mlp.output.W", (F, D)),
            (f"{p}.mlp.output.b", (D,)),
        ]
    return out + [("ln_f.gamma", (D,)), ("W_out.W", (D, V))]


def random_params(h, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in param_list(h):
        if name.endswith("gamma"):
            v = 1 + 0.2 * rng.standard_normal(shape)
        elif name.endswith("beta"):
            v = rng.uniform(0.3, 2.0, shape)
        else:
            v = 0.3 * rng.standard_normal(shape)
        params[name] = v.astype(np.float32)
    return params


def tfckpt_file(h, params) -> bytes:
    order = param_list(h)
    out = b"TFCKPT1\n" + struct.pack(
        "<8i",
        h["step"],
        h["vocab_size"],
        h["d_model"],
        h["num_heads"],
        h["num_layers"],
        h["d_ff"],
        h["max_len"],
        len(order),
    )
    for name, _ in order:
        v = params[name].astype("<f4").ravel()
        out += struct.pack("<i", len(name)) + name.encode() + struct.pack("<q", v.size) + v.tobytes()
    return out


# ------------------------------------------------------------------ model: model.py, utils/*.py
def forward(h, params, ids) -> np.ndarray:
    """Logits (B, T, V) in float64, K2's math."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    B, T = ids.shape
    D, H = h["d_model"], h["num_heads"]
    dh = D // H

    def rms(x, g):
        return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + 1e-5) * g

    def heads(x):
        return x.reshape(B, T, H, dh).transpose(0, 2, 1, 3)

    x = p["embedding.token_emb"][ids] + p["embedding.pos_emb"][:T]
    mask = np.triu(np.ones((T, T)), k=1)
    for i in range(h["num_layers"]):
        b = f"blocks.{i}"
        a = rms(x, p[f"{b}.ln1.gamma"])
        q, k, v = (heads(a @ p[f"{b}.attn.{w}.W"]) for w in ("Wq", "Wk", "Wv"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dh) + mask * -1e9
        w = np.exp(scores - scores.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        merged = (w @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
        x = x + merged @ p[f"{b}.attn.Wo.W"]
        m = rms(x, p[f"{b}.ln2.gamma"])
        hidden = m @ p[f"{b}.mlp.hidden.W"] + p[f"{b}.mlp.hidden.b"]
        gate, value = np.split(hidden, 2, axis=-1)
        beta = p[f"{b}.mlp.swiglu.beta"][0]
        s = gate * (1 / (1 + np.exp(-beta * gate))) * value
        x = x + s @ p[f"{b}.mlp.output.W"] + p[f"{b}.mlp.output.b"]
    return rms(x, p["ln_f.gamma"]) @ p["W_out.W"]
