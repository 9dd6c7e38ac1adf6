"""A tiny chat model built here, nothing downloaded: a byte-level BPE tokenizer trained on the spot, the Qwen2.5
chat template (it renders tools; TRL parses its tool calls) and a random-init Qwen2 decoder."""

from __future__ import annotations

import json
from typing import Any

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)


def _corpus(template: str) -> list[str]:
    """Texts the tokenizer learns its merges from: rendered chats with and without tools, words, the alphabet."""
    from jinja2 import Template

    render = Template(template)
    tool = {
        "type": "function",
        "function": {
            "name": "guess",
            "description": "Guess a number.",
            "parameters": {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]},
        },
    }
    chats = []
    for n in range(40):
        messages = [
            {"role": "user", "content": f"What is {n} + {n % 7}? Answer with <answer>{n + n % 7}</answer>."},
            {"role": "assistant", "content": f"<answer>{n + n % 7}</answer>"},
        ]
        chats.append(render.render(messages=messages, tools=None, add_generation_prompt=False))
        call = {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "guess", "arguments": {"number": n}}}],
        }
        reply = {"role": "tool", "content": json.dumps({"result": "higher" if n % 2 else "lower"})}
        chats.append(render.render(messages=[messages[0], call, reply], tools=[tool], add_generation_prompt=True))
    words = " ".join(["the a an is of to and in that answer number word yes no true false higher lower correct"] * 4)
    alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 .,:;!?'\"()[]{}<>/\\-_+=*#@$%&|~`^"
    return [*chats, words, alphabet]


def tiny_tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast`` of 512 tokens trained here (byte-level: any text encodes), the chat template
    set, ``<|im_end|>`` the end of turn, ``<|endoftext|>`` the padding."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen2_5_chat_template as template

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(template), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=template,
        padding_side="left",
    )


def tiny_chat_model(*, seed: int = 0) -> tuple[Any, Any]:
    """``(model, tokenizer)``: a random-init 2-layer Qwen2 causal LM (``seed`` fixes its weights) over
    ``tiny_tokenizer``; noise until trained."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = tiny_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|im_start|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model, tokenizer


def fit_chats(
    model: Any,
    tokenizer: Any,
    chats: list[Any],
    *,
    tools: list[Any] | None = None,
    steps: int = 60,
    learning_rate: float = 1e-2,
    seed: int = 0,
) -> list[float]:
    """A few supervised steps on chats (a list of messages, or TRL's ``{"messages", "tools"}``), the loss on the
    last message only, so a random model learns a shape (its answer a tool call); each step's loss."""
    import torch

    rows = []
    for chat in chats:
        messages, chat_tools = (chat["messages"], chat.get("tools")) if isinstance(chat, dict) else (chat, tools)
        prompt = tokenizer.apply_chat_template(
            messages[:-1], tools=chat_tools, add_generation_prompt=True, tokenize=False
        )
        whole = tokenizer.apply_chat_template(messages, tools=chat_tools, tokenize=False)
        rows.append((len(tokenizer(prompt)["input_ids"]), whole))
    batch = tokenizer([whole for _, whole in rows], return_tensors="pt", padding=True)
    labels = torch.full_like(batch["input_ids"], -100)
    for i, (prompt_len, _) in enumerate(rows):  # left padding: the chat ends at the right edge
        length = int(batch["attention_mask"][i].sum())
        start = batch["input_ids"].size(1) - length + prompt_len
        labels[i, start:] = batch["input_ids"][i, start:]
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    losses = []
    model.train()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        for _ in range(steps):
            loss = model(**batch, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # a high rate, kept from diverging
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
    model.eval()
    return losses
