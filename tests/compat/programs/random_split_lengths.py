"""random_split by lengths and by fractions, with a seeded Generator: the part sizes, that the parts
cover the data once, and that the same seed gives the same split."""
import torch
from torch.utils.data import DataLoader, TensorDataset, random_split

data = TensorDataset(torch.arange(50).float().unsqueeze(1), torch.arange(50) % 5)
train, val = random_split(data, [40, 10], generator=torch.Generator().manual_seed(42))
print(len(train), len(val))
seen = sorted(train.indices + val.indices)
print(seen == list(range(50)), len(set(train.indices) & set(val.indices)))

parts = random_split(range(30), [0.3, 0.3, 0.4])
print([len(p) for p in parts])
parts = random_split(range(11), [0.5, 0.25, 0.25])  # the remainder is dealt from the first part on
print([len(p) for p in parts])

again_a = random_split(range(20), [5, 15], generator=torch.Generator().manual_seed(7))
again_b = random_split(range(20), [5, 15], generator=torch.Generator().manual_seed(7))
print(list(again_a[0]) == list(again_b[0]), list(again_a[1]) == list(again_b[1]))

# the validation part still loads as a dataset: sums are order-independent
total = 0.0
count = 0
for x, y in DataLoader(val, batch_size=4):
    total += x.sum().item()
    count += len(y)
print(count, total == float(sum(val.indices)))
try:
    random_split(range(10), [3, 3])
except ValueError as error:
    print("ValueError", "Sum of input lengths" in str(error))
