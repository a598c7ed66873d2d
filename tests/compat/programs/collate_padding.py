"""Variable-length sequences batched with a custom collate_fn that pads (a text-classification
tutorial's pipeline), and default_collate on dict samples."""
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, default_collate

sentences = ["the cat sat", "a dog", "the dog sat on the mat", "cats and dogs", "a mat"]
labels = [0, 1, 0, 1, 1]
vocab = {w: i + 1 for i, w in enumerate(sorted({w for s in sentences for w in s.split()}))}


class Sentences(Dataset):
    def __len__(self):
        return len(sentences)

    def __getitem__(self, i):
        return [vocab[w] for w in sentences[i].split()], labels[i]


def pad_batch(batch):
    longest = max(len(ids) for ids, _ in batch)
    ids = torch.zeros(len(batch), longest, dtype=torch.long)
    for row, (tokens, _) in enumerate(batch):
        ids[row, : len(tokens)] = torch.tensor(tokens)
    lengths = torch.tensor([len(tokens) for tokens, _ in batch])
    return ids, lengths, torch.tensor([label for _, label in batch])


loader = DataLoader(Sentences(), batch_size=2, collate_fn=pad_batch)
table = nn.Embedding(len(vocab) + 1, 4)
rng = np.random.default_rng(4)
with torch.no_grad():
    table.weight.copy_(torch.tensor(rng.normal(size=(len(vocab) + 1, 4)), dtype=torch.float32))
    table.weight[0].zero_()
for ids, lengths, y in loader:
    mean = table(ids).sum(1) / lengths.unsqueeze(1)  # padding rows are zero
    print(ids.tolist(), lengths.tolist(), y.tolist(), f"{mean.abs().sum():.5f}")

samples = [{"ids": np.array([1, 2]), "score": 0.5, "tag": "x"}, {"ids": np.array([3, 4]), "score": 1.5, "tag": "y"}]
batch = default_collate(samples)
print(batch["ids"], batch["score"], batch["tag"], batch["score"].dtype == torch.float64)
pairs = default_collate([(1, 2.0), (3, 4.0)])
print(type(pairs).__name__, pairs[0].dtype == torch.int64, pairs[1].dtype == torch.float64)
