"""A siamese network with the contrastive loss of the well-known tutorials: one shared embedding
net applied to both inputs, `F.pairwise_distance`, the loss
mean((1 - label) * d^2 + label * clamp(margin - d, min=0)^2), and an evaluation of distances with
`nn.PairwiseDistance` and `nn.CosineSimilarity`; pairs and weights come from NumPy."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim


class SiameseNetwork(nn.Module):
    def __init__(self):
        super(SiameseNetwork, self).__init__()
        self.cnn1 = nn.Sequential(
            nn.Conv2d(1, 4, kernel_size=3),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, stride=2),
        )
        self.fc1 = nn.Sequential(nn.Linear(4 * 3 * 3, 16), nn.ReLU(inplace=True), nn.Linear(16, 2))

    def forward_once(self, x):
        output = self.cnn1(x)
        output = output.view(output.size()[0], -1)
        output = self.fc1(output)
        return output

    def forward(self, input1, input2):
        output1 = self.forward_once(input1)
        output2 = self.forward_once(input2)
        return output1, output2


class ContrastiveLoss(torch.nn.Module):
    def __init__(self, margin=2.0):
        super(ContrastiveLoss, self).__init__()
        self.margin = margin

    def forward(self, output1, output2, label):
        # Calculate the euclidean distance and calculate the contrastive loss
        euclidean_distance = F.pairwise_distance(output1, output2, keepdim=True)
        loss_contrastive = torch.mean(
            (1 - label) * torch.pow(euclidean_distance, 2)
            + (label) * torch.pow(torch.clamp(self.margin - euclidean_distance, min=0.0), 2)
        )
        return loss_contrastive


rng = np.random.default_rng(5)
net = SiameseNetwork()
with torch.no_grad():
    for p in net.parameters():
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
criterion = ContrastiveLoss()
optimizer = optim.Adam(net.parameters(), lr=0.005)

counter = []
loss_history = []
iteration_number = 0
for epoch in range(3):
    for i in range(3):
        img0 = torch.tensor(rng.normal(size=(4, 1, 8, 8)), dtype=torch.float32)
        img1 = torch.tensor(rng.normal(size=(4, 1, 8, 8)), dtype=torch.float32)
        label = torch.from_numpy(rng.integers(0, 2, size=(4, 1)).astype(np.float32))
        optimizer.zero_grad()
        output1, output2 = net(img0, img1)
        loss_contrastive = criterion(output1, output2, label)
        loss_contrastive.backward()
        optimizer.step()
        if i % 2 == 0:
            print("Epoch number {}\n Current loss {}\n".format(epoch, round(loss_contrastive.item(), 4)))
            iteration_number += 10
            counter.append(iteration_number)
            loss_history.append(loss_contrastive.item())

net.eval()
x0 = torch.tensor(rng.normal(size=(3, 1, 8, 8)), dtype=torch.float32)
x1 = torch.tensor(rng.normal(size=(3, 1, 8, 8)), dtype=torch.float32)
with torch.no_grad():
    output1, output2 = net(x0, x1)
    euclidean_distance = F.pairwise_distance(output1, output2)
    print("Dissimilarity:", euclidean_distance)
    print(nn.PairwiseDistance(p=1.0)(output1, output2), nn.PairwiseDistance(p=3, eps=0.0, keepdim=True)(output1, output2))
    print(nn.CosineSimilarity(dim=1, eps=1e-6)(output1, output2))
    print(F.pairwise_distance(output1[0], output2[0]), F.pairwise_distance(output1, output2[0], p=float("inf")))
print(len(counter), ["%.3f" % v for v in loss_history])

a = torch.tensor(rng.normal(size=(5, 3)), dtype=torch.float32, requires_grad=True)
b = torch.tensor(rng.normal(size=(5, 3)), dtype=torch.float32)
F.pairwise_distance(a, b, p=1.5).sum().backward()
print(a.grad)
