"""torch.utils: tensorboard (SummaryWriter)."""
