"""Real models: any `transformers` causal LM as an arl policy (`--model PATH_OR_ID`).

chat.py            the BugFix episode as a chat under the tokenizer's template, with owners
policy.py          HFPolicy: forward / new_cache / extend, the interface rollouts and trainers use
adapters.py        peft's adapter folders: recognized and loaded on their base (below policy.py)
lora.py            LoRA through peft (--lora-rank): adapters, their folders, the adapters-off base
tiny.py            a tiny random Qwen2- or Llama-style model and BPE tokenizer, built offline
toolcalls.py       native tool calls (Qwen2.5's, Llama 3.1's): tool specs, render, parse
templates.py       the tiny tokenizers' chat templates (ChatML; Qwen2.5's and Llama 3.1's)
template_check.py  what a chat template does to a growing conversation (`arl check template`)
"""
