"""Learning-rate schedules: the factor per step, and clear errors for what cannot run."""

import dataclasses
import math

import pytest

from tablegen_tf.config import ConfigError, OptimizerConfig, TrainConfig, load_config
from tablegen_tf.training.lr_schedule import is_scheduled, schedule_factor


def optimizer(**values) -> OptimizerConfig:
    return dataclasses.replace(OptimizerConfig(), **values)


def test_constant_is_one_at_every_step_and_not_scheduled():
    config = optimizer()
    assert not is_scheduled(config)
    assert [schedule_factor(config, step, 10) for step in (0, 5, 9)] == [1.0, 1.0, 1.0]


def test_cosine_anneals_from_one_to_the_final_fraction_over_the_budget():
    config = optimizer(schedule="cosine", final_lr_fraction=0.1)
    assert schedule_factor(config, 0, 100) == pytest.approx(1.0)
    assert schedule_factor(config, 50, 100) == pytest.approx(0.1 + 0.9 * 0.5)
    assert schedule_factor(config, 25, 100) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)))
    assert schedule_factor(config, 100, 100) == pytest.approx(0.1)
    assert schedule_factor(config, 150, 100) == pytest.approx(0.1)  # a resume past the budget stays at the floor


def test_linear_falls_in_equal_steps():
    config = optimizer(schedule="linear")
    factors = [schedule_factor(config, step, 4) for step in range(5)]
    assert factors == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])


def test_warmup_ramps_up_then_the_schedule_spans_the_remaining_steps():
    config = optimizer(schedule="linear", warmup_steps=4)
    assert is_scheduled(optimizer(warmup_steps=4))
    assert [schedule_factor(config, step, 12) for step in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert schedule_factor(config, 4, 12) == pytest.approx(1.0)
    assert schedule_factor(config, 8, 12) == pytest.approx(0.5)


@pytest.mark.parametrize("values, max_steps, message", [
    ({"schedule": "step"}, 10, "unknown schedule 'step'"),
    ({"schedule": "cosine"}, 0, "set train.max_steps"),
    ({"warmup_steps": -1}, 10, "warmup_steps must be >= 0"),
    ({"schedule": "linear", "final_lr_fraction": 1.5}, 10, "final_lr_fraction must be between 0 and 1"),
])
def test_a_schedule_the_budget_cannot_define_is_a_clear_error(values, max_steps, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(optimizer=optimizer(**values), max_steps=max_steps)


def test_a_config_file_with_a_schedule_is_checked_after_the_overrides():
    # The budget may come from --max-steps (an override) after the file named the schedule.
    config = load_config("e2e", {"train": {"optimizer": {"schedule": "cosine"}, "max_steps": 100}})
    assert config.train.optimizer.schedule == "cosine"
    with pytest.raises(ConfigError, match="set train.max_steps"):
        load_config("e2e", {"train": {"optimizer": {"schedule": "cosine"}, "max_steps": 0}})
