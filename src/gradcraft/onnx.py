"""torch.onnx: exporting to ONNX is not supported; `export` says so in one line."""

from gradcraft.errors import UserError


def export(model, args=(), f=None, **options):
    raise UserError(
        "ONNX export is not supported by gradcraft; save the weights with gradcraft.save(model.state_dict(), path) "
        "(a safetensors file) and export from PyTorch if you need an ONNX file"
    )


def is_in_onnx_export() -> bool:
    return False
