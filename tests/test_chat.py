"""Chat-template helper: assistant target masks, image-token expansion, padding, clear errors (offline tokenizer)."""
import json

import numpy as np
import pytest

from jaxdrive.models.chat import ChatEncoder
from jaxdrive.models.tokenizer_testing import TEST_TOKEN_IDS, TEST_VOCAB_SIZE, build_test_tokenizer

PAD, IMG = TEST_TOKEN_IDS["<|endoftext|>"], TEST_TOKEN_IDS["<|image_pad|>"]
VS, VE = TEST_TOKEN_IDS["<|vision_start|>"], TEST_TOKEN_IDS["<|vision_end|>"]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok")
    build_test_tokenizer(str(path))
    (path / "preprocessor_config.json").write_text(json.dumps({"merge_size": 2, "patch_size": 14}))
    return ChatEncoder.from_pretrained(str(path))


def _image_runs(ids):
    """Lengths of the <|image_pad|> runs, each checked to sit between <|vision_start|> and <|vision_end|>."""
    runs, i = [], 0
    while i < len(ids):
        if ids[i] == IMG:
            j = i
            while j < len(ids) and ids[j] == IMG:
                j += 1
            assert ids[i - 1] == VS and ids[j] == VE
            runs.append(j - i)
            i = j
        else:
            i += 1
    return runs


def test_tokenizer_ids_are_documented(encoder):
    tok = encoder.tokenizer
    assert len(tok) == TEST_VOCAB_SIZE == 263 and encoder.merge_size == 2
    assert {t: tok.convert_tokens_to_ids(t) for t in TEST_TOKEN_IDS} == TEST_TOKEN_IDS
    assert tok("Hé", add_special_tokens=False)["input_ids"] == list("Hé".encode())  # byte-level, id == byte


def test_target_mask_covers_exactly_the_assistant_turns(encoder):
    conv = [
        {"role": "system", "content": "Judge the trajectory."},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Is it safe?"}]},
        {"role": "assistant", "content": "<think>ok</think>\n<answer>yes</answer>"},
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": [{"type": "text", "text": "No collision."}]},
    ]
    enc = encoder.encode([conv], np.array([[1, 2, 4]]))
    ids, tgt = enc.input_ids[0], enc.target_mask[0]
    tok = encoder.tokenizer
    assert tok.decode(ids[tgt]) == "<think>ok</think>\n<answer>yes</answer><|im_end|>No collision.<|im_end|>"
    # each target span starts right after "<|im_start|>assistant\n" and ends on <|im_end|> (the "\n" after is context)
    starts = np.flatnonzero(tgt[1:] & ~tgt[:-1]) + 1
    ends = np.flatnonzero(tgt[:-1] & ~tgt[1:])
    assert len(starts) == len(ends) == 2
    for s, e in zip(starts, ends):
        assert tok.decode(ids[:s]).endswith("<|im_start|>assistant\n")
        assert ids[e] == TEST_TOKEN_IDS["<|im_end|>"] and tok.decode(ids[e + 1:e + 2]) == "\n"
    # the whole sequence is exactly the rendered template with the image expanded (2 pads = 1*2*4/4)
    expected = encoder.render(conv).replace("<|image_pad|>", "<|image_pad|>" * 2)
    assert tok.decode(ids) == expected
    assert enc.attention_mask.all() and enc.input_ids.dtype == np.int32


def test_two_images_of_different_sizes_and_batch_padding(encoder):
    two = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "vs"}, {"type": "image"}]},
           {"role": "assistant", "content": "left"}]
    one = [{"role": "user", "content": [{"type": "text", "text": "and"}, {"type": "image"}]}]
    grids = np.array([[1, 4, 6], [1, 8, 4], [2, 2, 2]])  # 6, 8 and 2 image tokens (t*h*w / merge**2)
    enc = encoder.encode([two, one], grids, padding_side="left", pad_to_multiple_of=16)
    assert enc.input_ids.shape[1] % 16 == 0
    assert _image_runs(list(enc.input_ids[0])) == [6, 8]
    assert _image_runs(list(enc.input_ids[1])) == [2]
    assert not enc.target_mask[enc.input_ids == IMG].any()
    # left padding: pads first, attention_mask marks real tokens, the row decodes to the generation-free prompt
    n_real = enc.attention_mask[1].sum()
    assert (enc.input_ids[1, :-n_real] == PAD).all() and enc.attention_mask[1, -n_real:].all()
    assert not enc.attention_mask[1, :-n_real].any()
    np.testing.assert_array_equal(enc.image_grid_thw, grids)
    gen = encoder.encode([one], grids[2:], add_generation_prompt=True)
    assert encoder.tokenizer.decode(gen.input_ids[0]).endswith("<|im_start|>assistant\n") and not gen.target_mask.any()


def test_bad_inputs_error_clearly(encoder):
    conv = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hi"}]}]
    with pytest.raises(ValueError, match="1 image placeholders but image_grid_thw has 2 rows"):
        encoder.encode([conv], np.array([[1, 2, 2], [1, 2, 2]]))
    with pytest.raises(ValueError, match="1 image placeholders but image_grid_thw has 0 rows"):
        encoder.encode([conv])
    with pytest.raises(ValueError, match="not divisible by merge_size=2"):
        encoder.encode([conv], np.array([[1, 3, 2]]))
    with pytest.raises(ValueError, match="wrap one in"):
        encoder.encode(conv, np.array([[1, 2, 2]]))
    with pytest.raises(ValueError, match="max_length"):
        encoder.encode([conv], np.array([[1, 2, 2]]), max_length=5)
