"""Vector norms, normalisation and cosine similarity for an embedding lookup."""
import numpy as np
import torch
import torch.nn.functional as F

rng = np.random.default_rng(15)
emb = torch.tensor(rng.normal(size=(5, 4)), dtype=torch.float32)
query = torch.tensor(rng.normal(size=(4,)), dtype=torch.float32)
print(emb.norm(dim=1).tolist())
print(torch.norm(emb).item(), emb.norm(p=1).item(), emb.norm(p=float("inf"), dim=1).tolist())
unit = F.normalize(emb, dim=1)
print(unit.norm(dim=1).tolist())
sims = F.cosine_similarity(emb, query.unsqueeze(0), dim=1)
print(sims.tolist(), int(sims.argmax()))
print((unit @ F.normalize(query, dim=0)).tolist())
