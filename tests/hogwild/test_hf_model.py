"""A real Hugging Face model through hogwild.train: a tiny random MarianMTModel (no download) holds frozen
sinusoidal position tables (requires_grad=False) and ties lm_head to the shared embedding. Skipped without the
optional extra `hf` (transformers)."""
import pytest
import torch

import hogwild
from tests.hogwild import engine_helpers as H
from tests.hogwild import frozen_tied_model as F

transformers = pytest.importorskip("transformers", reason="needs transformers, the optional extra: "
                                                          "pip install -e '.[hf]'")

VOCAB = 24


def tiny_marian(seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.MarianConfig(
        vocab_size=VOCAB, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=16,
        pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0)
    return transformers.MarianMTModel(config)


def marian_batches(n: int = 6) -> list[dict]:
    """Each target word is one of 3, set by its source word. source (4, 6), mask (4, 6), target (4, 6)."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(n):
        source = torch.randint(2, VOCAB, (4, 6), generator=generator)
        batches.append({"source": source, "mask": torch.ones_like(source), "target": source % 3 + 2})
    return batches


def frozen(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if not p.requires_grad}


def check_frozen_and_tied(model, initial: dict[str, torch.Tensor]) -> None:
    assert sorted(initial) == ["model.decoder.embed_positions.weight", "model.encoder.embed_positions.weight"]
    for name, p in model.named_parameters():
        if name in initial:
            assert torch.equal(p, initial[name]) and p.grad is None, name  # bit-identical
    assert model.lm_head.weight is model.model.decoder.embed_tokens.weight is model.model.shared.weight


def config(**kwargs):
    return hogwild.Config(**{"progress": False, "tensorboard": False, "seed": 3, "optimizer": "adam", "lr": 0.01,
                             **kwargs})


def test_one_replica_worker_equals_the_serial_adam_loop(tmp_path):
    batches = marian_batches()
    model, reference = tiny_marian(), tiny_marian()
    initial = frozen(model)
    result = hogwild.train(model, F.seq2seq_loss, batches,
                           config(devices=["cpu-replica"], epochs=2, checkpoint_dir=str(tmp_path)))
    assert result.updates == 12
    H.serial_reference(reference, F.seq2seq_loss, batches,
                       torch.optim.Adam([p for p in reference.parameters() if p.requires_grad], lr=0.01),
                       epochs=2, seed=3)
    for (name, got), expected in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6, msg=name)
    check_frozen_and_tied(model, initial)
    saved = torch.load(result.checkpoint, weights_only=False)
    assert len(saved["optimizer"]["state"]) == sum(p.requires_grad for p in model.parameters())
    restored = tiny_marian(seed=1)
    restored.load_state_dict(saved["model"])  # a user's way back: strict, and the tie survives
    check_frozen_and_tied(restored, initial)
    assert torch.equal(restored.lm_head.weight, model.lm_head.weight)


def test_two_workers_train_and_keep_the_position_tables():
    batches = marian_batches(n=8)
    model = tiny_marian()
    initial = frozen(model)
    before = sum(F.seq2seq_loss(model, b).item() for b in batches)
    result = hogwild.train(model, F.seq2seq_loss, batches, config(devices=["cpu"] * 2, epochs=4))
    assert result.updates == 32
    with torch.no_grad():
        assert sum(F.seq2seq_loss(model, b).item() for b in batches) < 0.6 * before
    check_frozen_and_tied(model, initial)
