"""F.interpolate in every mode, Upsample, PixelShuffle/Unshuffle, PReLU, GLU, logsigmoid,
EmbeddingBag (values and gradients);
run with torch and with gradcraft as torch by tests/test_oracle_scripts.py."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import numpy as np

rng = np.random.default_rng(2)


def T(a, rg=False, dt=torch.float32):
    return torch.tensor(np.asarray(a), dtype=dt, requires_grad=rg)


x4 = rng.normal(size=(2, 3, 4, 5))
x3 = rng.normal(size=(2, 3, 7))
for mode, kws in [
    ("nearest", [dict(scale_factor=2), dict(size=(7, 3)), dict(scale_factor=1.5), dict(scale_factor=(0.5, 2.5))]),
    ("nearest-exact", [dict(size=(7, 9)), dict(scale_factor=0.6)]),
    (
        "bilinear",
        [
            dict(scale_factor=2),
            dict(size=(7, 3), align_corners=True),
            dict(size=(7, 3)),
            dict(scale_factor=1.7, align_corners=False),
            dict(scale_factor=0.5),
        ],
    ),
    ("bicubic", [dict(scale_factor=2), dict(size=(5, 8), align_corners=True), dict(size=(3, 11))]),
    ("area", [dict(size=(2, 3))]),
]:
    for kw in kws:
        x = T(x4, True)
        y = F.interpolate(x, mode=mode, **kw)
        (y * torch.arange(y.numel()).reshape(y.shape).float().sin()).sum().backward()
        print(mode, kw, tuple(y.shape), y.sum().item(), y[0, 1, -1], x.grad.sum((0, 1)))
x = T(x3, True)
y = F.interpolate(x, scale_factor=2.5, mode="linear")
(y**2).sum().backward()
print(y[0, 0], x.grad[1, 2])
print(F.interpolate(T(x3), size=5, mode="linear", align_corners=True)[1])
print(F.interpolate(T(x3), size=12)[0, 0])
up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
print(up)
print(up(T(x4))[1, 2, 3], nn.Upsample(size=(3, 4)), nn.UpsamplingBilinear2d(scale_factor=2)(T(x4)).sum())
ps = nn.PixelShuffle(2)
pu = nn.PixelUnshuffle(2)
print(ps, pu)
z = T(rng.normal(size=(2, 8, 3, 2)), True)
s = ps(z)
print(s.shape, s[1, 1], pu(s).sub(z).abs().max())
(s * torch.linspace(0, 1, s.numel()).reshape(s.shape)).sum().backward()
print(z.grad[1, 5])
print(pu(T(rng.normal(size=(1, 2, 4, 6))))[0, :, 1])
# PReLU / GLU
pr = nn.PReLU(3)
print(pr)
with torch.no_grad():
    pr.weight.copy_(T([0.1, 0.2, -0.3]))
xx = T(rng.normal(size=(2, 3, 4)), True)
yy = pr(xx)
yy.sum().backward()
print(yy[1], xx.grad[1], pr.weight.grad)
print(nn.PReLU()(T([-1.0, 2.0])), F.prelu(T([-2.0, 0.5]), T([0.5])))
g = T(rng.normal(size=(3, 6)), True)
gl = F.glu(g)
gl.pow(2).sum().backward()
print(gl, g.grad, nn.GLU(0)(T(rng.normal(size=(4, 2)))))
print(F.logsigmoid(T([-30.0, -1.0, 0.0, 2.0, 40.0])), nn.LogSigmoid()(T([1.0])))
# EmbeddingBag
w = rng.normal(size=(10, 3))
for mode in ("sum", "mean", "max"):
    eb = nn.EmbeddingBag(10, 3, mode=mode, _weight=T(w))
    inp = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    off = torch.tensor([0, 4, 4])
    o = eb(inp, off)
    (o * T(rng.normal(size=(3, 3)))).sum().backward()
    print(mode, o, eb.weight.grad)
    print(eb(torch.tensor([[1, 2, 3], [4, 0, 0]])))
eb = nn.EmbeddingBag(10, 3, mode="sum", _weight=T(w), padding_idx=0, include_last_offset=True)
print(eb, eb(torch.tensor([1, 0, 4, 0, 3]), torch.tensor([0, 2, 5]), per_sample_weights=T([1.0, 2.0, 0.5, 1.0, -1.0])))
em = nn.EmbeddingBag(10, 3, mode="mean", _weight=T(w), padding_idx=2)
print(em(torch.tensor([[2, 2], [2, 1]])))
print(F.embedding_bag(torch.tensor([0, 1, 2]), T(w), torch.tensor([0, 1]), mode="max"))

# trilinear, 5-D nearest, recompute_scale_factor, 1-D area and linear, uint8 nearest, nearest-exact
v = torch.tensor(rng.normal(size=(1, 2, 3, 4, 5)), dtype=torch.float32, requires_grad=True)
for kw in [
    dict(scale_factor=2, mode="trilinear"),
    dict(size=(4, 3, 7), mode="trilinear", align_corners=True),
    dict(scale_factor=(1.5, 0.5, 2), mode="nearest"),
    dict(scale_factor=1.7, mode="trilinear", recompute_scale_factor=True),
    dict(scale_factor=1.7, mode="nearest", recompute_scale_factor=True),
]:
    v.grad = None
    y = F.interpolate(v, **kw)
    (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
    print(tuple(y.shape), y.sum(), y[0, 1, -1, -1], v.grad[0, 0, 1])
s = torch.tensor(rng.normal(size=(2, 3, 9)))
print(F.interpolate(s, size=4, mode="area"), F.interpolate(s, scale_factor=0.34, mode="linear"))
print(F.interpolate(torch.arange(16, dtype=torch.uint8).reshape(1, 1, 4, 4), scale_factor=1.5))
print(F.interpolate(s, scale_factor=2.3, mode="nearest-exact")[0, 0])
