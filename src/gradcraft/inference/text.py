"""From files to text: load a trained model with its tokenizer (checking that they belong
together), and generate text with streaming that never splits a multi-byte character."""

import codecs
import os

from safetensors import safe_open
from safetensors.numpy import load_file

import gradcraft as gc
from gradcraft.errors import UserError
from gradcraft.inference.generate import SamplingParams, generate
from gradcraft.models import ModelConfig, Transformer


def _need(path: str, what: str) -> str:
    if not path or not os.path.exists(path):
        raise UserError(f"{what} {path} does not exist")
    return path


# Names in a run folder, newest first: gradcraft's own files under names of their own, then the
# names older run folders used. A folder HF can open holds HF's config.json/model.safetensors/
# tokenizer.json; gradcraft reads those too (converting the weights), but prefers its own.
CONFIG_NAMES = ("gradcraft_config.json", "config.json")
WEIGHTS_NAMES = ("gradcraft_model.safetensors", "model.safetensors")
TOKENIZER_NAMES = ("gradcraft_tokenizer.json", "tokenizer.json")


def paths_from_model_dir(model_dir: str) -> tuple[str, str, str]:
    """(tokenizer, config, weights) of a training run. The tokenizer is the run folder's own copy (made
    at the start of training); for older runs, the one in the run's train_config.json dataset folder
    (where `gradcraft tokenize` put it)."""
    _need(model_dir, "model directory")

    def first(names):
        paths = [os.path.join(model_dir, n) for n in names]
        return next((p for p in paths if os.path.exists(p)), paths[-1])

    config, weights = first(CONFIG_NAMES), first(WEIGHTS_NAMES)
    candidates = [os.path.join(model_dir, n) for n in TOKENIZER_NAMES]
    train_config = os.path.join(model_dir, "train_config.json")
    if os.path.exists(train_config) and not any(os.path.exists(c) for c in candidates):
        from gradcraft.validation import Value, check_fields, read_json

        doc = check_fields(
            read_json(train_config),
            train_config,
            {"dataset": Value(str)},
            hint="the file was damaged or edited by hand; pass --vocab",
        )
        candidates.append(os.path.join(os.path.dirname(doc.get("dataset", "")), "tokenizer.json"))
    vocab = next((c for c in candidates if os.path.exists(c)), candidates[-1])
    return vocab, config, weights


def inference_dtype(dtype: str, device: str) -> str:
    """The dtype to generate in: "auto" is bfloat16 on a GPU (half the bytes read per token, and
    the GPU's fast path), float32 on the CPU (where bfloat16 arithmetic is emulated)."""
    if dtype == "auto":
        return "float32" if device == "cpu" else "bfloat16"
    return dtype


def load_model(
    config_path: str, weights_path: str, device: str = "cpu", dtype: str = "float32"
) -> tuple[Transformer, dict]:
    """The model with its weights, and the weights' metadata (tokenizer fingerprint); floating-point
    weights cast to `dtype` ("auto": see inference_dtype).

    Reads gradcraft's config and weights, or Hugging Face's (config.json with a model_type, weights
    in the HF layout, as `gradcraft export --format hf` writes them)."""
    from gradcraft.models.hf import from_hf_state, is_hf_state
    from gradcraft.training.runfiles import check_model_fits, check_weights_manifest, read_model_config
    from gradcraft.training.statecheck import check_weight_arrays

    config = read_model_config(_need(config_path, "config"))  # every field checked
    check_model_fits(config, config_path)  # before a byte of the model is allocated
    _need(weights_path, "weights file")
    check_weights_manifest(weights_path)  # the sha256 training wrote beside the final weights
    try:
        with safe_open(weights_path, "numpy") as f:
            metadata = f.metadata() or {}
        weights = load_file(weights_path)
    except Exception as e:  # safetensors raises its own error types for damaged files
        raise UserError(f"{weights_path} is not a readable safetensors file ({e})") from None
    check_weight_arrays(weights, weights_path)  # floating point and finite: no int8 cast to zeros
    model = Transformer(config)
    try:
        if is_hf_state(weights):
            taken = _Taken(weights)
            weights = from_hf_state(config, taken)
            left = sorted(set(taken) - taken.read)
            if left:  # e.g. a 4th layer the config's n_layers 3 would silently drop
                raise UserError(f"tensors the config has no place for: {', '.join(left[:3])}")
        model.load_state_dict(weights)
    except (UserError, ValueError) as e:
        reason = str(e).removeprefix("weights do not match the model: ")
        raise UserError(f"{weights_path} does not fit {config_path}: {reason}") from None
    if device != "cpu":
        model.to(device)
    dtype = inference_dtype(dtype, device)
    if dtype != "float32":
        model.to(getattr(gc, dtype))
    return model, metadata


class _Taken(dict):
    """The HF weights, remembering which tensors the conversion read."""

    def __init__(self, weights):
        super().__init__(weights)
        self.read = set()

    def __getitem__(self, name):
        self.read.add(name)
        return super().__getitem__(name)


def check_tokenizer(tokenizer, config: ModelConfig, metadata: dict, vocab_path: str) -> None:
    """Refuse a tokenizer that does not belong to the weights (the silent-garbage failure)."""
    if tokenizer.vocab_size != config.vocab_size:
        raise UserError(
            f"the tokenizer {vocab_path} has {tokenizer.vocab_size} tokens but the model was built for "
            f"{config.vocab_size}; use the tokenizer the model was trained with"
        )
    expected = metadata.get("tokenizer_fingerprint")
    if expected and expected != tokenizer.fingerprint:
        raise UserError(
            f"the tokenizer {vocab_path} (fingerprint {tokenizer.fingerprint}) is not the one the weights "
            f"were trained with ({expected}); use the tokenizer the model was trained with"
        )


class TextGenerator:
    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer

    def encode_prompt(self, prompt: str, split_special_tokens: bool = False) -> list:
        """The prompt's ids. A special token's text (`<|endoftext|>`) becomes its id, as Hugging Face's
        tokenizers and vLLM's server encode it; split_special_tokens: encode it as plain text (HF's
        option of that name)."""
        ids = self.tokenizer.encode(prompt, allowed_special=() if split_special_tokens else "all")
        if not ids:
            raise UserError("the prompt is empty")
        return ids

    def stop_ids(self) -> tuple:
        eot = self.tokenizer.eot_id
        return (eot,) if eot is not None else ()

    def complete(
        self, prompts: list[str], params: SamplingParams, on_text=None, split_special_tokens: bool = False
    ) -> tuple[list[str], list[str]]:
        """Complete each prompt. `on_text(i, piece)` streams text as it becomes valid UTF-8.
        split_special_tokens: special tokens' text in a prompt is plain text (see encode_prompt).

        Stop strings end a completion; the returned text stops before them.
        """
        params.stop_ids = self.stop_ids()
        streams = [TextStream(self.tokenizer, params.stop_strings) for _ in prompts]

        def on_token(i, token):
            piece, stopped = streams[i].push(token)
            if on_text is not None and piece:
                on_text(i, piece)
            return not stopped

        encoded = [self.encode_prompt(p, split_special_tokens) for p in prompts]
        ids, reasons = generate(self.model, encoded, params, on_token)
        self.last_token_counts = [len(i) for i in ids]
        for i, stream in enumerate(streams):
            piece = stream.finish()
            if on_text is not None and piece:
                on_text(i, piece)
            if stream.stopped:
                reasons[i] = "stop"
        return [stream.visible for stream in streams], reasons


class TextStream:
    """Token ids in, text out, as a client should see it: only whole UTF-8 characters, cut before the
    first stop string, and a tail that could still become a stop string held back until it cannot.

        stream = TextStream(tokenizer, ("\n\n",))
        piece, stopped = stream.push(token_id)   # the text that became final; stop when `stopped`
        piece = stream.finish()                  # what was held back, once generation ends
    """

    def __init__(self, tokenizer, stop_strings=()):
        self.tokenizer, self.stops = tokenizer, tuple(s for s in stop_strings if s)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""  # everything decoded so far
        self.visible = ""  # the text before the first stop string
        self.emitted = 0  # characters of `visible` handed out
        self.stopped = False

    def push(self, token: int) -> tuple[str, bool]:
        self.text += self.decoder.decode(self.tokenizer.decode_bytes([token]))
        return self._advance(final=False), self.stopped

    def finish(self) -> str:
        self.text += self.decoder.decode(b"", final=True)
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        self.visible, hit = _cut_at_stop(self.text, self.stops)
        self.stopped = self.stopped or hit
        hold = 0 if hit or final else max(_longest(self.stops) - 1, 0)
        safe = max(self.emitted, len(self.visible) - hold)
        piece = self.visible[self.emitted : safe]
        self.emitted = safe
        return piece


def _cut_at_stop(text: str, stops) -> tuple[str, bool]:
    cut = min((text.find(s) for s in stops if s and s in text), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def _longest(stops) -> int:
    return max((len(s) for s in stops), default=0)
