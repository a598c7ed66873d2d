"""The op table's rows for the PyTorch-compatibility surface: rounding and number tests,
sorting, norms, einsum and the products, the composed losses and activations, boolean-mask indexing,
and in-place operations recorded by autograd. Checked by tests/test_ops_compat.py with the same
harness as tests/optable.py (forward and gradient against PyTorch, float64 and float32, strided inputs).
"""

from optable import Const, Fixed, Ints, Mask, OpInfo, Pos, Values


def _inplace_chain(m, x, b):
    y = x * 1.0  # a non-leaf: in-place ops on it are recorded
    y += b
    y *= 2.0
    y.sub_(x, alpha=0.5)
    y /= 1.5
    y.clamp_(-1.0, 1.0)
    return y


def _setitem_slices(m, x, v):
    y = x * 1.0
    y[:, 1] = v
    y[0, 2:4] = 0.25
    return y


def _setitem_index(m, x, v, i):
    y = x * 2.0
    y[i] = v
    return y


def _setitem_mask(m, x, mask):
    y = x + 0.0
    y[mask] = -1.0
    y.masked_fill_(mask.logical_not() & (y > 0.5), 3.0)
    return y


def _value_into_constant(m, v, w):
    buf = m.T.zeros(3, 4, dtype=v.dtype)  # a constant buffer that becomes part of the graph
    buf[1] = v
    buf[:, 0] += w
    return buf * buf


def _modified_view_chain(m, x):
    y = x * 2.0
    z = y[:, :2] * 3.0
    y.add_(1.0)  # z read y before: it keeps y's old value (mul by a number saves nothing of y)
    return z + y.sum(1, keepdim=True)


COMPAT_OPS = [
    # ---- rounding (gradient zero through floor and friends, as in PyTorch)
    OpInfo("floor", lambda m, x: x.floor() * 0.5 + x, [((3, 4),)]),
    OpInfo("ceil_trunc_round", lambda m, x: (x * 3).ceil() + (x * 3).trunc() + (x * 3).round() + x, [((3, 4),)]),
    OpInfo("round_decimals", lambda m, x: m.T.round(x * 7, decimals=1), [((3, 4),)], grad=False),
    OpInfo("floordiv_float", lambda m, a, b: a // b, [((3, 4), Pos((3, 4))), ((2, 3), Pos(()))], grad=False),
    OpInfo("floordiv_scalar", lambda m, x: (x * 5) // 2 + 7 // (x.abs() + 1), [((3, 4),)], grad=False),
    OpInfo("remainder", lambda m, a, b: a % b, [((3, 4), Pos((3, 4))), ((2, 3, 4), Pos((4,)))]),
    OpInfo("remainder_scalar", lambda m, x: (x * 5) % 1.5 + x, [((3, 4),)]),
    OpInfo("scalar_remainder", lambda m, x: 2.5 % (x.abs() + 1) + (-2.5) % (x.abs() + 1), [((3, 4),)], grad=False),
    OpInfo("fmod", lambda m, a, b: m.T.fmod(a * 4, b), [((3, 4), Pos((3, 4)))]),
    OpInfo(
        "int_floordiv_mod",
        lambda m, i: (
            (i - 5) // 3
            + (i - 5) % 3
            + m.T.div(i - 5, 2, rounding_mode="trunc")
            + m.T.div(i - 5, 2, rounding_mode="floor")
        ),
        [(Ints(10, (4, 5)),)],
        grad=False,
    ),
    OpInfo(
        "isnan_isinf_isfinite",
        lambda m, x: (
            (x / (x > 0.5)).isnan().float() + (1 / (x > 0.3)).isinf().float() * 2 + (x.log()).isfinite().float() * 4
        ),
        [((3, 4),)],
        grad=False,
    ),
    OpInfo(
        "isclose",
        lambda m, a, b: m.T.isclose(a, a + b * 1e-6, rtol=1e-5, atol=1e-6).float(),
        [((3, 4), (3, 4))],
        grad=False,
    ),
    # ---- sorting and norms
    OpInfo("sort_values", lambda m, x: x.sort(dim=-1).values, [((3, 5),), ((2, 4, 3),)]),
    OpInfo("sort_descending", lambda m, x: m.T.sort(x, 0, descending=True).values * 1.0, [((5, 3),)]),
    OpInfo("sort_indices", lambda m, x: x.sort(1).indices, [((3, 5),)], grad=False),
    OpInfo("argsort", lambda m, x: x.argsort(dim=0, descending=True), [((4, 3),)], grad=False),
    OpInfo("norm_2", lambda m, x: x.norm(), [((3, 4),), ((2, 3, 4),)]),
    OpInfo("norm_dim", lambda m, x: x.norm(dim=1, keepdim=True), [((3, 4),)]),
    OpInfo(
        "norm_p", lambda m, x: x.norm(p=1, dim=-1) + x.norm(p=3, dim=-1) + x.norm(p=float("inf"), dim=-1), [((3, 4),)]
    ),
    OpInfo("prod", lambda m, x: x.prod(1) + x.prod(), [(Pos((3, 4)),)], rtol32=1e-4, atol32=1e-5),
    # ---- movement
    OpInfo("unbind", lambda m, x: x.unbind(1)[2] * 2.0 + x.unbind(0)[0][1], [((3, 4),)]),
    OpInfo("narrow", lambda m, x: x.narrow(1, 1, 2) * 1.0, [((3, 4),), ((2, 5, 3),)]),
    OpInfo("index_select", lambda m, x, i: x.index_select(1, i) * 1.0, [((3, 5), Ints(5, (4,)))]),
    OpInfo("select", lambda m, x: x.select(1, -1) * 1.0, [((3, 4, 2),)]),
    OpInfo("mask_getitem", lambda m, x, mask: x[mask] * 1.0, [((3, 4), Mask((3, 4))), ((3, 4), Mask((3,)))]),
    OpInfo("t", lambda m, x: x.t() @ x, [((3, 4),)]),
    # ---- products
    OpInfo("bmm", lambda m, a, b: m.T.bmm(a, b), [((2, 3, 4), (2, 4, 5))], rtol32=2e-4),
    OpInfo(
        "mm_dot_outer",
        lambda m, a, b, c: m.T.mm(a, b) * m.T.dot(c, c) + m.T.outer(c, c)[:3, :5],
        [((3, 4), (4, 5), (6,))],
        rtol32=2e-4,
    ),
    OpInfo("einsum_matmul", lambda m, a, b: m.T.einsum("ij,jk->ik", a, b), [((3, 4), (4, 5))], rtol32=2e-4),
    OpInfo("einsum_batch", lambda m, a, b: m.T.einsum("bij,bjk->bik", a, b), [((2, 3, 4), (2, 4, 5))], rtol32=2e-4),
    OpInfo(
        "einsum_attention",
        lambda m, q, k: m.T.einsum("bhqd,bhkd->bhqk", q, k),
        [((2, 3, 4, 5), (2, 3, 6, 5))],
        rtol32=2e-4,
    ),
    OpInfo(
        "einsum_ellipsis", lambda m, a, b: m.T.einsum("...ij,...jk->...ik", a, b), [((2, 3, 4), (4, 2))], rtol32=2e-4
    ),
    OpInfo("einsum_transpose_sum", lambda m, x: m.T.einsum("ij->ji", x) * 1.0 + m.T.einsum("ij->", x), [((3, 4),)]),
    OpInfo(
        "einsum_outer_dot", lambda m, a, b: m.T.einsum("i,j->ij", a, b) + m.T.einsum("i,i", a[:3], b), [((5,), (3,))]
    ),
    OpInfo("einsum_rowwise", lambda m, a, b: m.T.einsum("ij,ij->i", a, b), [((3, 4), (3, 4))]),
    OpInfo(
        "einsum_three", lambda m, a, b, c: m.T.einsum("ij,jk,kl->il", a, b, c), [((2, 3), (3, 4), (4, 5))], rtol32=2e-4
    ),
    OpInfo(
        "einsum_implicit_broadcast",
        lambda m, a, b: m.T.einsum("bij,jk", a, b) * 1.0,
        [((2, 3, 4), (4, 2))],
        rtol32=2e-4,
    ),
    OpInfo("einsum_sum_unique", lambda m, a, b: m.T.einsum("bij,bkj->bk", a, b), [((2, 3, 4), (2, 5, 4))]),
    # ---- composed losses and activations
    OpInfo("l1_loss", lambda m, a, b: m.F.l1_loss(a, b), [((3, 4), (3, 4))]),
    OpInfo(
        "smooth_l1_huber",
        lambda m, a, b: m.F.smooth_l1_loss(a, b, beta=0.5) + m.F.huber_loss(a, b, delta=0.7, reduction="sum"),
        [((3, 4), (3, 4))],
    ),
    OpInfo("bce", lambda m, p, t: m.F.binary_cross_entropy(p.sigmoid(), t.sigmoid()), [((3, 4), Fixed((3, 4)))]),
    OpInfo(
        "bce_with_logits",
        lambda m, x, t: m.F.binary_cross_entropy_with_logits(x, t.sigmoid(), reduction="sum"),
        [((3, 4), Fixed((3, 4)))],
    ),
    OpInfo(
        "bce_with_logits_pos_weight",
        lambda m, x, t, w: m.F.binary_cross_entropy_with_logits(x, t.sigmoid(), pos_weight=w.abs() + 0.5),
        [((3, 4), Fixed((3, 4)), Fixed((4,)))],
    ),
    OpInfo(
        "softplus_leaky_elu",
        lambda m, x: (
            m.F.softplus(x * 3) + m.F.leaky_relu(x, 0.2) + m.F.elu(x, 0.7) + m.F.softplus(x, beta=2.0, threshold=1.0)
        ),
        [((3, 4),)],
    ),
    OpInfo("normalize", lambda m, x: m.F.normalize(x, dim=-1), [((3, 4),), ((2, 3, 4),)]),
    OpInfo("cosine_similarity", lambda m, a, b: m.F.cosine_similarity(a, b, dim=-1), [((3, 4), (3, 4))]),
    OpInfo("logs", lambda m, x: x.log1p() + x.log2() + x.log10() + x.expm1(), [(Pos((3, 4)),)]),
    OpInfo("clamp_min_max", lambda m, x: x.clamp_min(0.1) + x.clamp_max(-0.1), [((3, 4),)]),
    # ---- in-place operations recorded by autograd
    OpInfo("inplace_chain", _inplace_chain, [((3, 4), (3, 4)), ((2, 3), (3,))]),
    OpInfo("setitem_slices", _setitem_slices, [((3, 5), (3,))]),
    OpInfo("setitem_index", _setitem_index, [((5, 3), (2, 3), Const([4, 1])), ((5, 3), (3,), Const([0, 2]))]),
    OpInfo("setitem_mask", _setitem_mask, [((3, 4), Mask((3, 4)))]),
    OpInfo("value_into_constant", _value_into_constant, [((4,), (3,))], noncontiguous=False),
    OpInfo("modified_after_read", _modified_view_chain, [((3, 4),)]),
]

# ---- convolution, pooling and normalisation (gradcraft/ops/conv.py, pooling.py, normalization.py)
COMPAT_OPS += [
    OpInfo(
        "conv2d",
        lambda m, x, w, b: m.F.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2), groups=2),
        [((2, 4, 7, 6), (6, 2, 3, 2), (6,))],
        rtol32=2e-4,
    ),
    OpInfo("conv1d_same", lambda m, x, w: m.F.conv1d(x, w, padding="same"), [((2, 3, 8), (4, 3, 4))], rtol32=2e-4),
    OpInfo(
        "conv_transpose2d",
        lambda m, x, w, b: m.F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2),
        [((2, 4, 3, 4), (4, 3, 3, 3), (6,))],
        rtol32=2e-4,
    ),
    OpInfo(
        "conv_transpose1d", lambda m, x, w: m.F.conv_transpose1d(x, w, stride=3, dilation=2), [((2, 3, 5), (3, 2, 3))]
    ),
    OpInfo("max_pool2d", lambda m, x: m.F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), [((2, 3, 7, 6),)]),
    OpInfo("max_pool1d_dilation", lambda m, x: m.F.max_pool1d(x, 2, stride=2, dilation=2), [((2, 3, 9),)]),
    OpInfo(
        "avg_pool2d",
        lambda m, x: m.F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        [((2, 3, 7, 6),)],
    ),
    OpInfo("avg_pool1d", lambda m, x: m.F.avg_pool1d(x, 3, 2, 1), [((2, 3, 8),)]),
    OpInfo(
        "adaptive_pools",
        lambda m, x: m.F.adaptive_avg_pool2d(x, (3, 4)) + m.F.adaptive_max_pool2d(x, (3, 4)),
        [((2, 3, 7, 6),)],
    ),
    OpInfo(
        "adaptive_pools_1d", lambda m, x: m.F.adaptive_avg_pool1d(x, 4) * m.F.adaptive_max_pool1d(x, 4), [((2, 3, 7),)]
    ),
    OpInfo(
        "batch_norm_training",
        lambda m, x, w, b: m.F.batch_norm(x, None, None, w, b, training=True, eps=1e-3),
        [((4, 3, 5), (3,), (3,)), ((3, 2, 2, 3), (2,), (2,))],
    ),
    OpInfo(
        "batch_norm_eval",
        lambda m, x, mean, var, w: m.F.batch_norm(x, mean, var.abs() + 0.5, w, None),
        [((4, 3, 5), Fixed((3,)), Fixed((3,)), (3,))],
    ),
    OpInfo("group_norm", lambda m, x, w, b: m.F.group_norm(x, 2, w, b), [((3, 4, 5), (4,), (4,))]),
    # ---- F.affine_grid / F.grid_sample (gradcraft/nn/grid_sample.py): gradients for the input and the grid
    *(
        OpInfo(
            f"grid_sample_{mode}_{padding}_{'aligned' if aligned else 'centres'}",
            lambda m, x, g, mode=mode, padding=padding, aligned=aligned: m.F.grid_sample(
                x, g * 0.8, mode=mode, padding_mode=padding, align_corners=aligned
            ),
            [((2, 3, 4, 5), (2, 3, 6, 2)), ((1, 1, 1, 3), (1, 2, 2, 2))],
        )
        for mode in ("bilinear", "nearest")
        for padding in ("zeros", "border")
        for aligned in (False, True)
    ),
    *(
        OpInfo(
            f"affine_grid_{'aligned' if aligned else 'centres'}",
            lambda m, theta, size, aligned=aligned: m.F.affine_grid(theta, size, align_corners=aligned),
            [((2, 2, 3), Const([2, 3, 4, 5])), ((1, 3, 4), Const([1, 1, 2, 3, 1]))],
        )
        for aligned in (False, True)
    ),
    *(
        OpInfo(
            f"grid_sample_edges_{mode}_{padding}",  # corners, centre, halfway (ties of nearest), far outside
            lambda m, x, g, mode=mode, padding=padding: m.T.cat(
                [
                    m.F.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=a).reshape(-1)
                    for a in (False, True)
                ]
            ),
            [
                (
                    (1, 2, 3, 5),
                    Values(((((-1.0, -1.0), (1.0, 1.0), (0.0, 0.0), (-0.75, 0.5), (1e6, -1e6), (1.1, -1.2)),),)),
                )
            ],
        )
        for mode in ("bilinear", "nearest")
        for padding in ("zeros", "border")
    ),
    *(
        OpInfo(
            f"spatial_transformer_identity_{'aligned' if aligned else 'centres'}",  # (points on pixels)
            lambda m, x, theta, aligned=aligned: m.F.grid_sample(
                x, m.F.affine_grid(theta, [1, 1, 7, 12], align_corners=aligned), align_corners=aligned
            ),
            [((1, 1, 7, 12), Values((((1.0, 0.0, 0.0), (0.0, 1.0, 0.0)),)))],
            noncontiguous=False,
        )
        for aligned in (False, True)
    ),
    OpInfo(
        "spatial_transformer",  # theta -> grid -> sampled image: the gradient reaches theta through the grid
        lambda m, x, theta: m.F.grid_sample(
            x, m.F.affine_grid(theta * 0.5, [2, 2, 3, 4], align_corners=False), align_corners=False
        ),
        [((2, 2, 5, 6), (2, 2, 3))],
    ),
]
