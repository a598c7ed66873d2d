"""pytorch/examples mnist_rnn, shrunk: each image's rows are an LSTM's sequence
(`nn.LSTM(input_size=..., hidden_size=..., batch_first=True)`), the last step through BatchNorm1d,
Dropout layers, two Linear layers and `F.log_softmax`; Adadelta with StepLR(step_size=1, gamma=0.7);
train() with `batch_idx % log_interval` printing and test() summing `F.nll_loss(reduction='sum')`
with `pred.eq(target.view_as(pred)).sum().item()`. Data and weights from NumPy; dropout is 0 (its
masks are random)."""

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, p=0.0):
        super(Net, self).__init__()
        self.rnn = nn.LSTM(input_size=8, hidden_size=16, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(16)
        self.dropout1 = nn.Dropout2d(p)
        self.dropout2 = nn.Dropout(p)
        self.fc1 = nn.Linear(16, 12)
        self.fc2 = nn.Linear(12, 4)

    def forward(self, input):
        # Shape of input is (batch_size,1, 8, 8)
        # Shape of input for RNN is (batch_size, 8, 8)
        input = input.reshape(-1, 8, 8)
        output, hidden = self.rnn(input)

        # RNN output shape is (seq_len, batch, input_size)
        # Get last output of RNN
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = self.fc1(output)
        output = F.relu(output)
        output = self.dropout2(output)
        output = self.fc2(output)
        output = F.log_softmax(output, dim=1)
        return output


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print(
                "Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                    epoch,
                    batch_idx * len(data),
                    len(train_loader.dataset),
                    100.0 * batch_idx / len(train_loader),
                    loss.item(),
                )
            )
            if args.dry_run:
                break


def test(args, model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)

    print(
        "\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n".format(
            test_loss, correct, len(test_loader.dataset), 100.0 * correct / len(test_loader.dataset)
        )
    )


def main():
    # Training settings
    parser = argparse.ArgumentParser(description="PyTorch MNIST Example using RNN")
    parser.add_argument("--batch-size", type=int, default=8, metavar="N", help="input batch size for training")
    parser.add_argument("--test-batch-size", type=int, default=16, metavar="N", help="input batch size for testing")
    parser.add_argument("--epochs", type=int, default=2, metavar="N", help="number of epochs to train")
    parser.add_argument("--lr", type=float, default=1.0, metavar="LR", help="learning rate")
    parser.add_argument("--gamma", type=float, default=0.7, metavar="M", help="learning rate step gamma")
    parser.add_argument("--cuda", action="store_true", default=False, help="enables CUDA training")
    parser.add_argument("--dry-run", action="store_true", default=False, help="quickly check a single pass")
    parser.add_argument("--seed", type=int, default=1, metavar="S", help="random seed (default: 1)")
    parser.add_argument("--log-interval", type=int, default=2, metavar="N", help="batches between logs")
    parser.add_argument("--save-model", action="store_true", default=False, help="For Saving the current Model")
    args = parser.parse_args([])

    use_cuda = args.cuda and torch.cuda.is_available()
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if use_cuda else "cpu")
    kwargs = {"num_workers": 0, "pin_memory": True} if use_cuda else {}

    rng = np.random.default_rng(args.seed)
    x = torch.tensor(rng.normal(size=(48, 1, 8, 8)), dtype=torch.float32)
    y = torch.tensor(rng.integers(0, 4, size=48))
    x[torch.arange(48), 0, y * 2, :] += 1.5
    train_loader = DataLoader(TensorDataset(x[:32], y[:32]), batch_size=args.batch_size, shuffle=False, **kwargs)
    test_loader = DataLoader(TensorDataset(x[32:], y[32:]), batch_size=args.test_batch_size, shuffle=False, **kwargs)

    model = Net().to(device)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(args, model, device, test_loader)
        scheduler.step()
    print(model.batchnorm.running_var, scheduler.get_last_lr())


if __name__ == "__main__":
    main()
