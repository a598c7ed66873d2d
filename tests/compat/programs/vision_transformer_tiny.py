"""A tiny Vision Transformer in the style of the popular from-scratch ViT examples: patches cut with
`unfold` (and checked against a reshape/permute patching), a linear patch embedding, a cls token
`nn.Parameter(torch.randn(1, 1, dim))` expanded over the batch and `torch.cat`ed in front, a learned
position embedding, `nn.TransformerEncoder` of `nn.TransformerEncoderLayer(batch_first=True,
norm_first=True, activation="gelu")`, the cls output through LayerNorm + Linear, `trunc_normal_`
initialisation, AdamW with CosineAnnealingWarmRestarts, and an eval loop with
`.argmax(dim=1).eq(target).sum().item()`."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def patchify(images, patch_size):
    # (B, C, H, W) -> (B, N, C * p * p)
    b, c, h, w = images.shape
    patches = images.unfold(2, patch_size, patch_size).unfold(3, patch_size, patch_size)
    patches = patches.permute(0, 2, 3, 1, 4, 5).contiguous()
    return patches.view(b, -1, c * patch_size * patch_size)


def patchify_reshape(images, patch_size):
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // patch_size, patch_size, w // patch_size, patch_size)
    x = x.permute(0, 2, 4, 1, 3, 5)
    return x.flatten(3).flatten(1, 2)


class ViT(nn.Module):
    def __init__(self, image_size=8, patch_size=4, channels=1, num_classes=3, dim=16, depth=2, heads=2, mlp_dim=32):
        super().__init__()
        assert image_size % patch_size == 0, "Image dimensions must be divisible by the patch size."
        num_patches = (image_size // patch_size) ** 2
        patch_dim = channels * patch_size**2
        self.patch_size = patch_size
        self.patch_to_embedding = nn.Linear(patch_dim, dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.zeros(1, num_patches + 1, dim))
        encoder_layer = nn.TransformerEncoderLayer(
            d_model=dim, nhead=heads, dim_feedforward=mlp_dim, dropout=0.0, activation="gelu", batch_first=True,
            norm_first=True,
        )
        self.transformer = nn.TransformerEncoder(encoder_layer, num_layers=depth, enable_nested_tensor=False)
        self.mlp_head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, num_classes))
        nn.init.trunc_normal_(self.pos_embedding, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    def forward(self, img):
        x = patchify(img, self.patch_size)
        x = self.patch_to_embedding(x)
        b, n, _ = x.shape
        cls_tokens = self.cls_token.expand(b, -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        x += self.pos_embedding[:, : (n + 1)]
        x = self.transformer(x)
        return self.mlp_head(x[:, 0])


rng = np.random.default_rng(21)
model = ViT()
print("trunc_normal_ within [-2, 2]:", bool(model.cls_token.abs().max() <= 2.0), model.mlp_head[1].bias)
with torch.no_grad():
    for name, p in model.named_parameters():
        if p.dim() > 1:
            p.copy_(torch.tensor(rng.normal(0, 0.2, size=tuple(p.shape)), dtype=torch.float32))
print(sum(p.numel() for p in model.parameters() if p.requires_grad))

images = torch.tensor(rng.normal(size=(12, 1, 8, 8)), dtype=torch.float32)
targets = torch.tensor(rng.integers(0, 3, size=12))
print(torch.equal(patchify(images, 4), patchify_reshape(images, 4)), patchify(images, 4).shape)

optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=3, T_mult=2, eta_min=1e-4)
iters = 2
for epoch in range(4):
    model.train()
    for i in range(iters):
        data, target = images[i * 6 : (i + 1) * 6], targets[i * 6 : (i + 1) * 6]
        optimizer.zero_grad()
        output = model(data)
        loss = F.cross_entropy(output, target)
        loss.backward()
        optimizer.step()
        scheduler.step(epoch + i / iters)
    model.eval()
    correct = 0
    with torch.no_grad():
        output = model(images)
        correct += output.argmax(dim=1).eq(targets).sum().item()
    print(f"epoch {epoch} loss {loss.item():.4f} acc {correct}/{len(targets)} lr {scheduler.get_last_lr()[0]:.6f}")
