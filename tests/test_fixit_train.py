"""fixit train end to end on CPU: a tiny random Llama and a tokenizer built here, real TRL + PEFT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trajectory_data import populated_store

for _mod in ("trl", "peft", "transformers", "datasets", "accelerate", "tokenizers"):
    pytest.importorskip(_mod, reason=f"{_mod} not installed (pip install 'kernelpro[train]')")

from kernelpro.cli import main as cli  # noqa: E402
from kernelpro.fixit import export  # noqa: E402

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tiny_model(data_dir: Path, model_dir: Path) -> None:
    """A word-level tokenizer trained on the export itself and a 2-layer Llama, randomly initialised."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    texts = [m["content"] for line in (data_dir / "train.jsonl").read_text().splitlines()
             for m in json.loads(line)["messages"]]
    specials = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>", "<eos>"]
    tk = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tk.train_from_iterator(texts + ["system user assistant"], trainers.WordLevelTrainer(special_tokens=specials))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", pad_token="<pad>", eos_token="<|im_end|>",
                                  bos_token="<|im_start|>", additional_special_tokens=["<eos>"])
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(model_dir)
    torch.manual_seed(0)
    # initializer_range 0.3, not Llama's 0.02: with tiny random weights the logits are near-uniform
    # whatever the hidden state, and a LoRA (lm_head is not adapted) could not move the loss at all.
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=2048,
                      initializer_range=0.3, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id)
    LlamaForCausalLM(cfg).save_pretrained(model_dir)


def test_lora_sft_loss_goes_down_and_resumes(tmp_path: Path, monkeypatch, capsys):
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(var, "0")  # restored after the test; train sets them to 1 itself
    store, _ = populated_store(tmp_path / "runs.db")
    data = tmp_path / "data"
    export(store, data, holdout_frac=0.25)
    model = tmp_path / "tiny-llama"
    build_tiny_model(data, model)
    out = tmp_path / "sft"
    common = ["fixit", "train", "--data", str(data), "--model", str(model), "-o", str(out), "--lr", "1e-2",
              "--batch-size", "2", "--grad-accum", "1", "--max-length", "768", "--lora-r", "8",
              "--lora-alpha", "16", "--lora-dropout", "0", "--logging-steps", "2", "--save-steps", "10",
              "--warmup-ratio", "0", "--precision", "fp32", "--no-gradient-checkpointing", "--no-progress"]
    assert cli(common + ["--max-steps", "30", "--eval-data", str(data)]) == 0
    log = json.loads((out / "train_log.json").read_text())
    losses = [loss for _, loss in log["losses"]]
    assert log["steps"] == 30 and len(losses) >= 10
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    assert last < 0.75 * first, f"loss did not go down enough: {losses}"
    evals = [e["eval_loss"] for e in log["eval"]]
    assert len(evals) == 3 and evals[-1] < evals[0]  # held-out tasks' loss falls too
    adapter = out / "adapter"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
    assert json.loads((adapter / "adapter_config.json").read_text())["r"] == 8
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-10", "checkpoint-20", "checkpoint-30"]
    # Resume: picks up the newest checkpoint and continues the step count.
    assert cli(common + ["--max-steps", "34", "--resume"]) == 0
    log2 = json.loads((out / "train_log.json").read_text())
    assert log2["resumed_from"].endswith("checkpoint-30") and log2["steps"] == 34
    assert "trained 34 steps" in capsys.readouterr().out


def test_bad_model_path_is_one_line(tmp_path: Path, capsys):
    store, _ = populated_store(tmp_path / "runs.db")
    export(store, tmp_path / "data", holdout_frac=0.0)
    rc = cli(["fixit", "train", "--data", str(tmp_path / "data"), "--model", str(tmp_path / "nope"),
              "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 1 and "not a local model folder" in err and "Traceback" not in err
    rc = cli(["fixit", "train", "--data", str(tmp_path / "missing"), "--model", str(tmp_path), "-o", str(tmp_path / "o")])
    assert rc == 1
    # A max length the prompts alone exceed would train nothing: refused before any step.
    build_tiny_model(tmp_path / "data", tmp_path / "m")
    rc = cli(["fixit", "train", "--data", str(tmp_path / "data"), "--model", str(tmp_path / "m"), "-o",
              str(tmp_path / "o"), "--max-length", "64", "--precision", "fp32"])
    err = capsys.readouterr().err
    assert rc == 1 and "raise --max-length" in err
