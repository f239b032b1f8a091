"""A tiny Qwen3-architecture model for trying the `lm` policy, built offline in a few seconds.

`synth-tui tiny-model DIR` writes it for a user without the Hugging Face hub at hand (it learns
the press task app's one-label game, nothing else: a way to watch the lm policy learn, not a model
to use); the `lm` policy's tests and benchmarks build the same one.

2 layers, hidden size 64, about 130k parameters, random weights (seeded); a byte-level BPE
tokenizer trained here with `tokenizers` on text shaped like the tool-calling chats the press
task app plays, with Qwen3's special and added tokens, and TRL's Qwen3 chat template (which is
not prefix-preserving, so the policy acts with TRL's training variant: docs/embedded-policy.md).
Needs the trainer extra (callers check first: app.local.policies.trainer_extra_missing).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Qwen3's special tokens (never produced by the byte-level pieces) and its added, non-special
# tokens: the tool-call scaffold is matched as text by the grammar, so it must not be "special".
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


@dataclass(frozen=True)
class ChatTokens:
    """The turn markers a TRL template writes (special tokens of the tiny tokenizer), its end of
    turn (the eos) and its bos, if any: what a tokenizer needs to carry that template."""

    special: tuple[str, ...]
    eos: str
    bos: str | None = None


CHATML = ChatTokens(tuple(SPECIAL_TOKENS), "<|im_end|>")
LLAMA3 = ChatTokens(("<|endoftext|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                     "<|eom_id|>", "<|python_tag|>"), "<|eot_id|>", "<|begin_of_text|>")
# TRL's templates (trl/chat_templates/<name>.jinja) the tiny tokenizer can be built for, by their chat tokens.
TEMPLATE_TOKENS: dict[str, ChatTokens] = {
    "qwen3": CHATML, "qwen2_5": CHATML, "qwen3_instruct_2507": CHATML, "qwen3_5_nothink": CHATML,
    "llama3_1": LLAMA3, "llama3_2": LLAMA3,
    "phi3_5": ChatTokens(("<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"), "<|end|>"),
    "gemma3": ChatTokens(("<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"), "<end_of_turn>", "<bos>"),
}
LABELS = ("A", "B", "C", "D")
VOCAB = 1024


def _corpus() -> list[str]:
    """Text shaped like what the press (and the tests' guess) task apps and the chat template write."""
    lines = []
    for label in LABELS:
        call = json.dumps({"name": "press", "arguments": {"label": label}})
        lines += [f"Press {label}.", f"<tool_call>\n{call}\n</tool_call>", f"You pressed {label}.",
                  f'{{"label": "{label}"}}', f"guess {label} number higher lower"]
    lines += ["system\nuser\nassistant\ntool\n# Tools\n\nYou may call one or more functions to assist with the "
              "user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:",
              '{"type": "function", "function": {"name": "press", "description": "Press a button.", '
              '"parameters": {"type": "object", "properties": {"label": {"type": "string", "enum": '
              '["A", "B", "C", "D"]}}, "required": ["label"], "additionalProperties": false}}}',
              "For each function call, return a json object with function name and arguments within "
              "<tool_call></tool_call> XML tags", "<think>\n\n</think>\n\n", "0123456789 right wrong"]
    return lines * 20


def build_tokenizer(folder: Path, template: str = "qwen3") -> Any:
    """The tiny tokenizer with `template`'s chat tokens and TRL's template of that name."""
    import trl
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tokens = TEMPLATE_TOKENS[template]
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - len(ADDED_TOKENS), special_tokens=list(tokens.special),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(_corpus(), trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, eos_token=tokens.eos, pad_token=tokens.special[0], bos_token=tokens.bos)
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / f"{template}.jinja").read_text()
    tokenizer.save_pretrained(folder)
    return tokenizer


def build_tiny_qwen3(folder: Path, seed: int = 0, initializer_range: float = 0.1, template: str = "qwen3") -> Path:
    """Write the tiny model and its tokenizer into `folder` (Hugging Face format); returns it.
    `template`: the TRL chat template (a key of TEMPLATE_TOKENS) its tokenizer speaks.

    Weights are drawn with std 0.1, not Qwen3's 0.02: the embeddings are tied to the output
    layer, and at 0.02 the logits have so little range that a LoRA adapter (which cannot touch
    the embeddings) barely moved the model's choice in a dozen steps."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(folder, template)
    config = Qwen3Config(vocab_size=max(VOCAB, len(tokenizer)), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         max_position_embeddings=2048, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=None, initializer_range=initializer_range)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(folder)
    return folder
