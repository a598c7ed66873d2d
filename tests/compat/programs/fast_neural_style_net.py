"""pytorch/examples fast_neural_style, shrunk: the TransformerNet's ConvLayer (ReflectionPad2d then
Conv2d), InstanceNorm2d(affine=True), ResidualBlocks, `utils.gram_matrix` with bmm, `normalize_batch`
with `new_tensor(...).view(-1, 1, 1)` and `div_(255.0)`, and the training step's content and style
losses with `mse_loss`. A small fixed conv net stands in for VGG16; the weights and images come from
NumPy."""

import numpy as np
import torch


class TransformerNet(torch.nn.Module):
    def __init__(self):
        super(TransformerNet, self).__init__()
        # Initial convolution layers
        self.conv1 = ConvLayer(3, 8, kernel_size=5, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(8, affine=True)
        self.conv2 = ConvLayer(8, 16, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(16, affine=True)
        # Residual layers
        self.res1 = ResidualBlock(16)
        self.res2 = ResidualBlock(16)
        # Upsampling layers
        self.deconv1 = torch.nn.ConvTranspose2d(16, 8, kernel_size=3, stride=2, padding=1, output_padding=1)
        self.in4 = torch.nn.InstanceNorm2d(8, affine=True)
        self.deconv3 = ConvLayer(8, 3, kernel_size=5, stride=1)
        # Non-linearities
        self.relu = torch.nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.res1(y)
        y = self.res2(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.deconv3(y)
        return y


class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super(ConvLayer, self).__init__()
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        out = self.reflection_pad(x)
        out = self.conv2d(out)
        return out


class ResidualBlock(torch.nn.Module):
    """ResidualBlock
    introduced in: https://arxiv.org/abs/1512.03385
    recommended architecture: http://torch.ch/blog/2016/02/04/resnets.html
    """

    def __init__(self, channels):
        super(ResidualBlock, self).__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        out = out + residual
        return out


class Features(torch.nn.Module):
    """Stands in for Vgg16: a few conv stages whose outputs are the 'relu' features."""

    def __init__(self, requires_grad=False):
        super(Features, self).__init__()
        self.slice1 = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.ReLU(inplace=True))
        self.slice2 = torch.nn.Sequential(
            torch.nn.MaxPool2d(kernel_size=2, stride=2), torch.nn.Conv2d(6, 8, 3, padding=1), torch.nn.ReLU(inplace=True)
        )
        if not requires_grad:
            for param in self.parameters():
                param.requires_grad = False

    def forward(self, X):
        h = self.slice1(X)
        h_relu1_2 = h
        h = self.slice2(h)
        h_relu2_2 = h
        return [h_relu1_2, h_relu2_2]


def gram_matrix(y):
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    features_t = features.transpose(1, 2)
    gram = features.bmm(features_t) / (ch * h * w)
    return gram


def normalize_batch(batch):
    # normalize using imagenet mean and std
    mean = batch.new_tensor([0.485, 0.456, 0.406]).view(-1, 1, 1)
    std = batch.new_tensor([0.229, 0.224, 0.225]).view(-1, 1, 1)
    batch = batch.div_(255.0)
    return (batch - mean) / std


rng = np.random.default_rng(3)
transformer = TransformerNet()
vgg = Features(requires_grad=False)
with torch.no_grad():
    for p in list(transformer.parameters()) + list(vgg.parameters()):
        p.copy_(torch.tensor(rng.normal(0, 0.3, size=tuple(p.shape)), dtype=torch.float32))
print(transformer.in1, sum(p.numel() for p in transformer.parameters()))
print([n for n, _ in transformer.named_parameters()][:6])
optimizer = torch.optim.Adam(transformer.parameters(), 1e-2)
mse_loss = torch.nn.MSELoss()
content_weight, style_weight = 1.0, 10.0

style = torch.tensor(rng.uniform(0, 255, size=(1, 3, 16, 16)), dtype=torch.float32)
features_style = vgg(normalize_batch(style.repeat(2, 1, 1, 1)))
gram_style = [gram_matrix(y) for y in features_style]
print([tuple(g.shape) for g in gram_style])

agg_content_loss = 0.0
agg_style_loss = 0.0
for batch_id in range(3):
    x = torch.tensor(rng.uniform(0, 255, size=(2, 3, 16, 16)), dtype=torch.float32)
    n_batch = len(x)
    optimizer.zero_grad()

    y = transformer(x)

    y = normalize_batch(y)
    x = normalize_batch(x)

    features_y = vgg(y)
    features_x = vgg(x)

    content_loss = content_weight * mse_loss(features_y[1], features_x[1])

    style_loss = 0.0
    for ft_y, gm_s in zip(features_y, gram_style):
        gm_y = gram_matrix(ft_y)
        style_loss += mse_loss(gm_y, gm_s[:n_batch, :, :])
    style_loss *= style_weight

    total_loss = content_loss + style_loss
    total_loss.backward()
    optimizer.step()

    agg_content_loss += content_loss.item()
    agg_style_loss += style_loss.item()
    mesg = "batch {}\tcontent: {:.6f}\tstyle: {:.6f}\ttotal: {:.6f}".format(
        batch_id + 1,
        agg_content_loss / (batch_id + 1),
        agg_style_loss / (batch_id + 1),
        (agg_content_loss + agg_style_loss) / (batch_id + 1),
    )
    print(mesg)

transformer.eval()
with torch.no_grad():
    output = transformer(torch.tensor(rng.uniform(0, 255, size=(1, 3, 16, 16)), dtype=torch.float32)).cpu()
img = output[0].clone().clamp(0, 255).numpy()
img = img.transpose(1, 2, 0).astype("uint8")
print(output.shape, img.shape, img.dtype, round(float(output.mean()), 3))
print(torch.nn.functional.instance_norm(output, eps=1e-5).std(dim=(2, 3)))
