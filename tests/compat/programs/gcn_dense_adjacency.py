"""A two-layer graph convolutional network (Kipf & Welling) in the pytorch/examples gcn style, on a
small random graph with a dense adjacency: A + I normalised as D^-1/2 (A + I) D^-1/2 (with
`torch.pow(deg, -0.5)` and `isinf` zeroed), GraphConv layers with nn.Parameter weights and
`torch.mm`, `F.log_softmax`, `F.nll_loss` on the training mask, Adam with weight decay, and the
masked accuracy `pred[mask].eq(labels[mask]).sum().item() / mask.sum().item()`."""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

rng = np.random.default_rng(11)
num_nodes, num_features, num_classes = 24, 10, 3
edges = rng.integers(0, num_nodes, size=(2, 60))
features = torch.tensor(rng.normal(size=(num_nodes, num_features)), dtype=torch.float32)
labels = torch.tensor(rng.integers(0, num_classes, size=num_nodes))

adj = torch.zeros(num_nodes, num_nodes)
adj[torch.tensor(edges[0]), torch.tensor(edges[1])] = 1.0
adj = ((adj + adj.t()) > 0).float()
adj = adj + torch.eye(num_nodes)
deg = adj.sum(dim=1)
deg_inv_sqrt = torch.pow(deg, -0.5)
deg_inv_sqrt[torch.isinf(deg_inv_sqrt)] = 0.0
d_mat_inv_sqrt = torch.diag(deg_inv_sqrt)
adj = torch.mm(torch.mm(d_mat_inv_sqrt, adj), d_mat_inv_sqrt)
print("symmetric:", torch.allclose(adj, adj.T), "row sums", adj.sum(1)[:4])

idx_train = torch.arange(0, 12)
idx_val = torch.arange(12, 18)
idx_test = torch.arange(18, num_nodes)
train_mask = torch.zeros(num_nodes, dtype=torch.bool)
train_mask[idx_train] = True


class GraphConv(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super(GraphConv, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.FloatTensor(in_features, out_features))
        if bias:
            self.bias = nn.Parameter(torch.FloatTensor(out_features))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.weight.size(1))
        self.weight.data.uniform_(-stdv, stdv)
        if self.bias is not None:
            self.bias.data.uniform_(-stdv, stdv)

    def forward(self, input, adj):
        support = torch.mm(input, self.weight)
        output = torch.mm(adj, support)
        if self.bias is not None:
            return output + self.bias
        else:
            return output

    def __repr__(self):
        return self.__class__.__name__ + " (" + str(self.in_features) + " -> " + str(self.out_features) + ")"


class GCN(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout):
        super(GCN, self).__init__()
        self.gc1 = GraphConv(nfeat, nhid)
        self.gc2 = GraphConv(nhid, nclass)
        self.dropout = dropout

    def forward(self, x, adj):
        x = F.relu(self.gc1(x, adj))
        x = F.dropout(x, self.dropout, training=self.training)
        x = self.gc2(x, adj)
        return F.log_softmax(x, dim=1)


model = GCN(nfeat=num_features, nhid=16, nclass=num_classes, dropout=0.0)
print(model)
with torch.no_grad():
    for p in model.parameters():
        bound = 1.0 / math.sqrt(p.shape[-1])
        p.copy_(torch.tensor(rng.uniform(-bound, bound, size=tuple(p.shape)), dtype=torch.float32))
optimizer = torch.optim.Adam(model.parameters(), lr=0.05, weight_decay=5e-4)


def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    correct = correct.sum()
    return correct / len(labels)


for epoch in range(8):
    model.train()
    optimizer.zero_grad()
    output = model(features, adj)
    loss_train = F.nll_loss(output[train_mask], labels[train_mask])
    acc_train = accuracy(output[idx_train], labels[idx_train])
    loss_train.backward()
    optimizer.step()

    model.eval()
    output = model(features, adj)
    loss_val = F.nll_loss(output[idx_val], labels[idx_val])
    acc_val = accuracy(output[idx_val], labels[idx_val])
    print(
        "Epoch: {:04d}".format(epoch + 1),
        "loss_train: {:.4f}".format(loss_train.item()),
        "acc_train: {:.4f}".format(acc_train.item()),
        "loss_val: {:.4f}".format(loss_val.item()),
        "acc_val: {:.4f}".format(acc_val.item()),
    )

model.eval()
with torch.no_grad():
    output = model(features, adj)
    pred = output.argmax(dim=1)
    test_mask = ~train_mask
    test_acc = pred[test_mask].eq(labels[test_mask]).sum().item() / test_mask.sum().item()
print("Test set results:", "loss= {:.4f}".format(F.nll_loss(output[idx_test], labels[idx_test]).item()), f"acc= {test_acc:.4f}")
print(output.exp().sum(1)[:3], output[idx_test].topk(2, dim=1).indices[0])
