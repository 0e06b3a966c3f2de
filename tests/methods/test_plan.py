"""Each method plans itself (methods/<m>.py `plan`, through the training entry's preflight,
training/plan.py): a bad setting stops before any process group, with one message naming its flag
(Freeze's layers, LoRA's rank, alpha, dropout and what it cannot run with, SCALE's sizes, the
--route-* flags only a routed model takes), and LLaMA-Pro's default block count divides the base.
What --load's records give each method is tests/training/test_from_load.py's."""

from __future__ import annotations

import pytest

from megatron_scale.testing.runs import MODEL, make_dataset
from megatron_scale.training.config import parse
from megatron_scale.training.plan import plan


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_dataset(tmp_path_factory.mktemp("d") / "en", seed=0)


@pytest.mark.parametrize(
    ("extra", "world", "flag"),
    [
        (("--method", "freeze", "--freeze-layers", "9"), 1, "--freeze-layers"),
        (("--method", "lora", "--lora-rank", "0"), 1, "--lora-rank"),
        (("--method", "lora", "--lora-alpha", "0"), 1, "--lora-alpha"),
        (("--method", "lora", "--lora-dropout", "1"), 1, "--lora-dropout"),
        (("--method", "lora", "--tensor-model-parallel-size", "2", "--sequence-parallel"), 2, "--sequence-parallel"),
        # alone, a g' completes h' at the GQA ratio (scale_config.py); 3 groups over 2 ranks cannot work
        (("--scale-groups-up", "3", "--tensor-model-parallel-size", "2"), 2, "--scale-groups-up"),
        (("--route-tau", "0.7"), 1, "--route-tau: only a --method scale-route model routes"),
        (("--method", "scale-route", "--route-tau", "nan"), 1, "--route-tau: tau must be a finite number"),
        (("--route-direction", "below"), 1, "--route-direction: only a --method scale-route model routes"),
        (("--route-unit", "char"), 1, "--route-unit: only a --method scale-route model routes"),
        (("--transformer-impl", "transformer_engine", "--method", "lora"), 1, "--method lora: not with --transformer-impl"),
        # the base stream's backward (issue 62): no skip where a trainable parameter is upstream of it
        (("--method", "scale-adapt", "--scale-base-backward", "skip"), 1, "--scale-base-backward skip: SCALE-adapt's W12"),
        (("--method", "scale-route", "--scale-route-adapt", "--scale-base-backward", "skip"), 1,
         "--scale-base-backward skip: SCALE-route's W12"),
        (("--method", "lora", "--scale-base-backward", "skip"), 1,
         "--scale-base-backward skip: --method lora trains LoRA adapters on the base's own linears"),
        (("--method", "full", "--scale-base-backward", "skip"), 1,
         "--scale-base-backward skip: --method full trains the base model's own weights"),
    ],
)
def test_a_bad_method_setting_names_the_flag(data: str, extra: tuple, world: int, flag: str) -> None:
    with pytest.raises(ValueError, match=flag):
        plan(parse([*MODEL, "--train-iters", "4", "--data-path", data, *extra]), world)


def test_llama_pro_blocks_default_divides_the_base() -> None:
    """--llama-pro-blocks defaults to the divisor of the base's layers nearest a quarter of them
    (SmolLM2's 30 layers: 6, where 30 // 4 = 7 would not divide); an explicit value that does not
    divide is refused naming the flag, before any model is built."""
    from megatron_scale.methods.llama_pro import default_llama_pro_blocks
    from megatron_scale.training.config import MethodConfig

    assert [default_llama_pro_blocks(n) for n in (4, 30, 32, 7, 1)] == [1, 6, 8, 1, 1]
    assert MethodConfig(name="llama-pro").pro_blocks(30) == 6
    assert MethodConfig(name="llama-pro", llama_pro_blocks=5).pro_blocks(30) == 5
    with pytest.raises(ValueError, match="--llama-pro-blocks 7 must divide the base's 30 layers"):
        MethodConfig(name="llama-pro", llama_pro_blocks=7).pro_blocks(30)


def test_base_backward_is_a_training_setting_of_a_scale_checkpoint(data: str) -> None:
    """--scale-base-backward (issue 62): a new SCALE-Preserve run skips the base stream's backward
    by default, an Adapt run keeps it, full turns the skip off; from a SCALE checkpoint the
    recorded setting holds unless the flag is given (a training setting, like the gate's), and
    auto resolves on the recorded geometry."""
    from pathlib import Path

    from megatron_scale.checkpoint.records import CheckpointRecords
    from megatron_scale.methods import Given, Scale
    from megatron_scale.methods.scale import ScaleSettings
    from megatron_scale.scale_config import ScaleConfig
    from megatron_scale.training.config import MethodConfig
    from tests import _tiny

    def fresh(*extra: str) -> str:
        return plan(parse([*MODEL, "--train-iters", "4", "--data-path", data, *extra]), 1).method.dims.training.base_backward

    assert fresh() == "skip" and fresh("--method", "scale-route") == "skip"
    assert fresh("--method", "scale-adapt") == "full" and fresh("--scale-base-backward", "full") == "full"

    def from_checkpoint(variant: str, recorded: str, flag: str | None) -> str:
        dims = ScaleConfig(variant=variant, base_backward=recorded).resolve(_tiny.base_config(1))
        records = CheckpointRecords(directory=Path("ckpt"), model_args=None, train_state=None, layout=None,
                                    digest="d", scale={"dims": dims.to_record()})
        name = f"scale-{variant}"
        given = Given(name=name, flags=MethodConfig(name=name, scale=ScaleSettings(base_backward=flag)),
                      arch=_tiny.ARGS, tp=1, sequence_parallel=False, seed=1, records=records, resuming=True,
                      where="--load ckpt")
        return Scale.plan(given).dims.training.base_backward

    assert from_checkpoint("preserve", "full", None) == "full"
    assert from_checkpoint("preserve", "full", "auto") == "skip"
    assert from_checkpoint("preserve", "skip", "full") == "full"
    assert from_checkpoint("adapt", "full", "auto") == "full"
    with pytest.raises(ValueError, match="--scale-base-backward skip: SCALE-adapt's W12"):
        from_checkpoint("adapt", "full", "skip")
