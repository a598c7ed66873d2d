"""`gradcraft serve` as OpenAI's API answers the official `openai` package (skipped when absent): error
classes and their fields, token-id prompts, prompt scoring (max_tokens 0 with echo and logprobs, what
lm-eval-harness sends), special tokens in prompts, model lookup, content parts, the include_usage chunk,
logprobs and usage cut with the text at a stop string, penalties, and unsupported fields."""

import json
import urllib.request

import numpy as np
import pytest

import gradcraft as gc
from gradcraft.inference.generate import SamplingParams, generate_without_cache
from test_server import start_in_process
from test_server_api import _generator

openai = pytest.importorskip("openai")

NAME = "tiny"


@pytest.fixture(scope="module")
def served(trained_run):
    generator = _generator(trained_run)
    url, _, stop = start_in_process(generator, NAME, slots=4, aliases=("tiny-alias",))
    yield url, generator
    stop()


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[0] + "/v1", api_key="unused", max_retries=0)


def prompt_logprobs(model, ids) -> list:
    """Each prompt token's log-probability under a direct forward pass (None for the first)."""
    with gc.no_grad():
        logits = model(gc.tensor(np.array([ids], dtype=np.int64)))[0].float().numpy().astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    logprobs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return [None] + [float(logprobs[i, t]) for i, t in enumerate(ids[1:])]


def test_invalid_values_are_400_bad_request_errors_naming_the_parameter(client):
    for kwargs, param in (
        ({"temperature": -1}, "temperature"),
        ({"top_p": 5}, "top_p"),
        ({"max_tokens": 100000}, "max_tokens"),
        ({"frequency_penalty": 3}, "frequency_penalty"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"min_p": 1.5}, "min_p"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"logit_bias": {"5": 101}}, "logit_bias"),
        ({"logit_bias": {"999999": 1}}, "logit_bias"),
        ({"suffix": "unsupported"}, "suffix"),
        ({"best_of": 3}, "best_of"),
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            client.completions.create(model=NAME, prompt="def ", extra_body={"max_tokens": 2, **kwargs})
        e = caught.value
        assert e.status_code == 400 and e.type == "invalid_request_error" and e.param == param, (kwargs, e.body)
        assert set(e.body) == {"message", "type", "param", "code"}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=NAME,
            messages=[{"role": "user", "content": "x"}],
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        )
    assert caught.value.param == "tools"
    with pytest.raises(openai.BadRequestError):  # an image part: refused, not dropped
        client.chat.completions.create(
            model=NAME, messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]
        )


def test_models_are_looked_up_and_an_unknown_model_is_not_found(client):
    assert client.models.retrieve(NAME).id == NAME
    assert [m.id for m in client.models.list()] == [NAME]
    for call in (
        lambda: client.models.retrieve("gpt-4o"),
        lambda: client.completions.create(model="gpt-4o", prompt="def ", max_tokens=1),
        lambda: client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}]),
    ):
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        assert caught.value.code == "model_not_found" and caught.value.param == "model"
    assert client.completions.create(model="tiny-alias", prompt="def ", max_tokens=1).model == NAME


def test_token_id_prompts_equal_their_text(served, client):
    _, generator = served
    texts = ["def ", "x = "]
    ids = [generator.tokenizer.encode(t) for t in texts]
    for i, text in enumerate(texts):
        by_text = client.completions.create(model=NAME, prompt=text, max_tokens=5, temperature=0)
        by_ids = client.completions.create(model=NAME, prompt=ids[i], max_tokens=5, temperature=0)
        assert by_ids.choices[0].text == by_text.choices[0].text and by_ids.usage == by_text.usage
    batch = client.completions.create(model=NAME, prompt=ids, max_tokens=5, temperature=0, echo=True)
    assert [c.text[: len(t)] for c, t in zip(batch.choices, texts)] == texts
    for bad in ([[]], [10**6]):
        with pytest.raises(openai.BadRequestError) as caught:
            client.completions.create(model=NAME, prompt=bad, max_tokens=1)
        assert caught.value.param == "prompt"


def test_max_tokens_0_with_echo_scores_the_prompt_as_a_forward_pass_does(served, client):
    _, generator = served
    text = "def reverse_string(s):\n    return"
    ids = generator.tokenizer.encode(text)
    expected = prompt_logprobs(generator.model, ids)
    for prompt in (text, ids):
        answer = client.completions.create(
            model=NAME, prompt=prompt, max_tokens=0, echo=True, logprobs=1, temperature=0
        )
        choice = answer.choices[0]
        assert choice.text == text and choice.finish_reason == "length"
        assert answer.usage.prompt_tokens == len(ids) and answer.usage.completion_tokens == 0
        got = choice.logprobs.token_logprobs
        assert got[0] is None and got[1:] == pytest.approx(expected[1:], abs=1e-4)
        assert "".join(choice.logprobs.tokens) == text
    # lm-eval's request: the context and continuation, max_tokens 1; the prompt's part is the same
    one = client.completions.create(model=NAME, prompt=ids, max_tokens=1, echo=True, logprobs=1, temperature=0)
    assert one.choices[0].logprobs.token_logprobs[1 : len(ids)] == pytest.approx(expected[1:], abs=1e-4)
    # ... also when the token generated is the end of text (forced here): it is listed (empty text) and
    # counted, so that lm-eval's `token_logprobs[ctxlen:-1]` drops it and not the prompt's last token
    eot = generator.tokenizer.eot_id
    ended = client.completions.create(
        model=NAME, prompt=ids, max_tokens=1, echo=True, logprobs=1, temperature=0, logit_bias={str(eot): 100}
    )
    choice = ended.choices[0]
    assert choice.finish_reason == "stop" and choice.text == text and ended.usage.completion_tokens == 1
    assert len(choice.logprobs.token_logprobs) == len(ids) + 1 and choice.logprobs.tokens[-1] == ""
    assert choice.logprobs.token_logprobs[1:-1] == pytest.approx(expected[1:], abs=1e-4)
    assert choice.logprobs.token_logprobs[-1] == pytest.approx(
        prompt_logprobs(generator.model, ids + [eot])[-1], abs=1e-4
    )
    # a prompt that only is scored may fill the whole context
    context = generator.model.config.seq_len
    full = (ids * context)[:context]
    scored = client.completions.create(model=NAME, prompt=full, max_tokens=0, echo=True, logprobs=0)
    assert scored.choices[0].logprobs.token_logprobs[1:] == pytest.approx(
        prompt_logprobs(generator.model, full)[1:], abs=1e-4
    )
    assert client.completions.create(model=NAME, prompt="def ", max_tokens=0).choices[0].text == ""


def test_special_tokens_in_prompt_text_are_special_unless_asked_otherwise(served, client, trained_run):
    tokenizers = pytest.importorskip("tokenizers")  # (what transformers' AutoTokenizer, lm-eval's, runs)
    _, generator = served
    hf = tokenizers.Tokenizer.from_file(str(trained_run / "run" / "tokenizer.json"))
    text = "<|endoftext|>def "
    eot = generator.tokenizer.eot_id
    assert hf.encode(text).ids[0] == eot  # what the run folder's HF tokenizer makes of it
    answer = client.completions.create(model=NAME, prompt=text, max_tokens=0, echo=True, logprobs=0)
    assert answer.usage.prompt_tokens == len(hf.encode(text).ids)
    assert answer.choices[0].logprobs.tokens[0] == "<|endoftext|>" and answer.choices[0].text == text
    plain = client.completions.create(
        model=NAME, prompt=text, max_tokens=0, echo=True, extra_body={"split_special_tokens": True}
    )
    assert plain.usage.prompt_tokens == len(generator.tokenizer.encode_ordinary(text)) > answer.usage.prompt_tokens


def test_chat_content_parts_equal_a_string(client):
    kwargs = dict(model=NAME, max_tokens=4, temperature=0)
    parts = [{"type": "text", "text": "def "}, {"type": "text", "text": "x"}]
    with_parts = client.chat.completions.create(messages=[{"role": "user", "content": parts}], **kwargs)
    with_text = client.chat.completions.create(messages=[{"role": "user", "content": "def x"}], **kwargs)
    assert with_parts.choices[0].message.content == with_text.choices[0].message.content


def test_a_json_body_is_read_whatever_its_content_type(served):
    url = served[0] + "/v1/completions"
    body = json.dumps({"prompt": "def ", "max_tokens": 2, "temperature": 0}).encode()
    answers = []
    for content_type in (None, "application/x-www-form-urlencoded", "text/plain"):
        request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type} if content_type else {})
        if content_type is None:
            request.remove_header("Content-type")
        with urllib.request.urlopen(request, timeout=60) as r:
            answers.append(json.loads(r.read())["choices"][0]["text"])
    assert len(set(answers)) == 1


def test_the_include_usage_chunk_has_no_choices(client):
    kwargs = dict(model=NAME, prompt="def ", max_tokens=6, temperature=0.8, seed=1, n=2)
    plain = client.completions.create(**kwargs)
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    assert chunks[-1].choices == [] and chunks[-1].usage == plain.usage
    assert all(c.usage is None and c.choices for c in chunks[:-1])
    chat = list(
        client.chat.completions.create(
            model=NAME,
            messages=[{"role": "user", "content": "x"}],
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chat[-1].choices == [] and chat[-1].usage.completion_tokens <= 3


def test_logprobs_and_usage_follow_the_text_a_stop_string_cuts(client):
    kwargs = dict(model=NAME, prompt="    return", max_tokens=6, temperature=0, logprobs=0)
    full = client.completions.create(**kwargs).choices[0]
    tokens, text = full.logprobs.tokens, full.text
    starts = np.cumsum([0] + [len(t) for t in tokens])[:-1]
    cases = 0
    for j in range(1, len(tokens)):
        for inside in (0, 1):  # the stop string begins at token j's first character, or inside it
            k = int(starts[j]) + inside
            stop = text[k : k + 2]
            if len(stop) < 2 or text.find(stop) != k or (inside and len(tokens[j]) < 2):
                continue
            cut = client.completions.create(stop=stop, **kwargs)
            choice = cut.choices[0]
            kept = j + inside  # the tokens whose text starts before the cut
            assert choice.text == text[:k] and choice.finish_reason == "stop"
            assert choice.logprobs.tokens == tokens[:kept] and cut.usage.completion_tokens == kept
            assert "".join(choice.logprobs.tokens).startswith(choice.text)
            cases += 1
    assert cases >= 2


def test_penalties_and_logit_bias_change_the_answer_as_the_host_oracle_does(served, client):
    _, generator = served
    ids = generator.tokenizer.encode("def ")
    for kwargs in (
        {"frequency_penalty": 1.5},
        {"presence_penalty": 2.0},
        {"repetition_penalty": 1.8},
        {"logit_bias": {"40": 100}},
        {"logit_bias": {"40": 30}, "frequency_penalty": 2.0, "temperature": 0.9, "seed": 5, "min_p": 0.05},
    ):
        temperature = kwargs.pop("temperature", 0)
        seed = kwargs.pop("seed", None)
        extra = {k: kwargs.pop(k) for k in ("repetition_penalty", "min_p") if k in kwargs}
        answer = client.completions.create(
            model=NAME, prompt=ids, max_tokens=8, temperature=temperature, seed=seed, extra_body=extra, **kwargs
        )
        params = SamplingParams(
            max_tokens=8,
            temperature=temperature,
            top_k=None,
            seed=seed,
            stop_ids=generator.stop_ids(),
            frequency_penalty=kwargs.get("frequency_penalty", 0.0),
            presence_penalty=kwargs.get("presence_penalty", 0.0),
            repetition_penalty=extra.get("repetition_penalty", 1.0),
            logit_bias={int(k): v for k, v in kwargs.get("logit_bias", {}).items()} or None,
            min_p=extra.get("min_p", 0.0),
        )
        expected = generator.tokenizer.decode(generate_without_cache(generator.model, ids, params))
        assert answer.choices[0].text == expected, (kwargs, extra)
        unpenalized = client.completions.create(
            model=NAME, prompt=ids, max_tokens=8, temperature=temperature, seed=seed
        )
        assert answer.choices[0].text != unpenalized.choices[0].text, (kwargs, extra)  # (they do something)
    forced = client.completions.create(model=NAME, prompt="def ", max_tokens=5, temperature=0, logit_bias={"40": 100})
    assert forced.choices[0].text == generator.tokenizer.decode([40] * 5)


def test_lm_evals_rolling_log_likelihood_request_equals_a_forward_pass(served, client):
    """What lm-eval-harness's local-completions model sends for a loglikelihood_rolling document (untokenized
    requests: the end-of-text token written as text, then the document; max_tokens 1, echo, logprobs 1) and
    how it reads the answer (the sum of token_logprobs[ctxlen:-1], ctxlen 1): the document's log-likelihood
    after the end-of-text token, as a forward pass gives it."""
    _, generator = served
    document = "def reverse_string(s):\n    return s[::-1]"
    eot = generator.tokenizer.eot_id
    ids = [eot] + generator.tokenizer.encode(document)
    for prompt in ("<|endoftext|>" + document, ids):
        answer = client.completions.create(
            model=NAME, prompt=prompt, max_tokens=1, echo=True, logprobs=1, temperature=0, seed=1234
        )
        got = sum(answer.choices[0].logprobs.token_logprobs[1:-1])
        assert got == pytest.approx(sum(prompt_logprobs(generator.model, ids)[1:]), abs=1e-3)
