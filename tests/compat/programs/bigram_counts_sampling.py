"""A bigram character model from counts (makemore's first lecture): the count matrix, the smoothed
probabilities, the data's negative log-likelihood, and names drawn with torch.multinomial. Sampling
draws differ between generators, so what is printed is what any draw must satisfy, plus draws from
one-hot rows, which are certain."""
import torch

words = ["emma", "olivia", "ava", "isabella", "sophia", "mia", "amelia", "harper", "evelyn", "abigail"]
chars = sorted(set("".join(words)))
stoi = {s: i + 1 for i, s in enumerate(chars)}
stoi["."] = 0
itos = {i: s for s, i in stoi.items()}
V = len(stoi)

N = torch.zeros((V, V), dtype=torch.int32)
for w in words:
    chs = ["."] + list(w) + ["."]
    for ch1, ch2 in zip(chs, chs[1:]):
        N[stoi[ch1], stoi[ch2]] += 1
print(V, N.sum().item(), N[0].tolist())

P = (N + 1).float()
P /= P.sum(1, keepdims=True)
print(P.shape, P.sum(1)[:5])

log_likelihood = 0.0
n = 0
for w in words:
    chs = ["."] + list(w) + ["."]
    for ch1, ch2 in zip(chs, chs[1:]):
        log_likelihood += torch.log(P[stoi[ch1], stoi[ch2]])
        n += 1
nll = -log_likelihood
print(f"{log_likelihood=:.4f}")
print(f"{nll/n:.4f}")

g = torch.Generator().manual_seed(2147483647)
for _ in range(5):
    out, ix = [], 0
    while True:
        p = P[ix]
        ix = torch.multinomial(p, num_samples=1, replacement=True, generator=g).item()
        out.append(itos[ix])
        if ix == 0 or len(out) > 30:
            break
    name = "".join(out)
    print(name.endswith(".") or len(out) > 30, all(c in stoi for c in name))

# greedy decoding through multinomial: the rows made one-hot at their most likely next character
greedy = torch.zeros_like(P)
greedy[torch.arange(V), P.argmax(1)] = 1.0
ix, out = 0, []
for _ in range(8):
    ix = torch.multinomial(greedy[ix], 1).item()
    out.append(itos[ix])
print("".join(out))
draws = torch.multinomial(P[stoi["a"]], 10, replacement=False)
print(draws.shape, len(set(draws.tolist())), sorted(torch.multinomial(torch.ones(6), 6).tolist()))
