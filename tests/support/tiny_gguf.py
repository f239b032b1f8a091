"""A tiny model as one .gguf file, written offline: for the tests of `[model] base = "x.gguf"`
(the registry's SmolLM2 GGUF needs the network; tests/support/smollm2.py fetches it only to
provision the machine).

A random Qwen2-architecture model (2 layers, hidden size 64) with the tiny model's tokenizer
(app/local/policies/lm/tiny_model.py), written with the `gguf` package in float32 under llama.cpp's tensor
names, with the chat template given. Qwen2, not the tiny model's Qwen3: transformers reads no
head size from a Qwen3 GGUF (it assumes 128). Transformers does not map the attention biases of
a Qwen2 GGUF back (they load as new): the model is random anyway; what the tests need is a file
that loads and acts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_tiny_gguf(path: Path, tokenizer_folder: Path, chat_template: str) -> Path:
    """Write the model to `path` (a .gguf file); `tokenizer_folder` holds a tokenizer.json."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=True, rms_norm_eps=1e-6)
    model = Qwen2ForCausalLM(config)
    tokenizer = json.loads((tokenizer_folder / "tokenizer.json").read_text(encoding="utf-8"))
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, config, {name: t.detach().numpy() for name, t in model.state_dict().items()}, tokenizer,
           chat_template)
    return path


def _write(path: Path, config: Any, weights: dict[str, Any], tokenizer: dict[str, Any], chat_template: str) -> None:
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_embedding_length(config.hidden_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(10_000.0)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    _add_tokenizer(writer, tokenizer, config.vocab_size)
    writer.add_chat_template(chat_template)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, config.num_hidden_layers)
    for name, array in weights.items():
        if name == "lm_head.weight":  # tied to the embedding
            continue
        base, suffix = name.rsplit(".", 1)
        writer.add_tensor(f"{names.get_name(base)}.{suffix}", array.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _add_tokenizer(writer: Any, tokenizer: dict[str, Any], size: int) -> None:
    import gguf

    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [gguf.TokenType.UNUSED] * size
    for text, index in tokenizer["model"]["vocab"].items():
        tokens[index], types[index] = text, gguf.TokenType.NORMAL
    added = {t["content"]: t for t in tokenizer["added_tokens"]}
    for text, token in added.items():
        tokens[token["id"]] = text
        types[token["id"]] = gguf.TokenType.CONTROL if token["special"] else gguf.TokenType.USER_DEFINED
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]])
    writer.add_bos_token_id(added["<|endoftext|>"]["id"])
    writer.add_eos_token_id(added["<|im_end|>"]["id"])
    writer.add_pad_token_id(added["<|endoftext|>"]["id"])
