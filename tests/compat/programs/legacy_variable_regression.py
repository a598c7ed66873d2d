"""An old-style (PyTorch 0.3) tutorial: Variable wrappers, torch.FloatTensor / LongTensor
constructors and x.type(), still accepted by today's PyTorch."""
import numpy as np
import torch
from torch.autograd import Variable

x_data = Variable(torch.FloatTensor([[1.0], [2.0], [3.0], [4.0]]))
y_data = Variable(torch.Tensor([[2.0], [4.0], [6.0], [8.0]]))
w = Variable(torch.FloatTensor([0.5]), requires_grad=True)
print(x_data.requires_grad, w.requires_grad, isinstance(w, torch.FloatTensor))

for epoch in range(30):
    y_pred = x_data * w
    loss = ((y_pred - y_data) ** 2).mean()
    loss.backward()
    w.data = w.data - 0.02 * w.grad.data
    w.grad.data.zero_()
    if epoch % 10 == 0:
        print(epoch, round(loss.item(), 6), round(w.item(), 6))
print("predict 5:", round((Variable(torch.FloatTensor([[5.0]])) * w).item(), 5))

labels = torch.LongTensor([2, 0, 1])
print(labels.type(), labels.dtype == torch.int64, labels.tolist())
as_float = labels.type(torch.FloatTensor)
print(as_float.type(), as_float.tolist(), labels.float().type())
print(torch.DoubleTensor([1.5, 2.5]).type(), torch.IntTensor([7, 8]).sum().item())
print(torch.FloatTensor(2, 3).shape, torch.LongTensor(4).shape, torch.ByteTensor([1, 0]).tolist())
arr = np.array([[1, 2], [3, 4]], dtype=np.float32)
print(torch.FloatTensor(arr).sum().item(), isinstance(torch.ones(2), torch.LongTensor))
