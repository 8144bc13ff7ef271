"""Learning-rate schedules over the step budget (``train.optimizer.schedule``).

``constant`` keeps ``learning_rate`` (then only decay on plateau changes it). ``cosine`` and
``linear`` anneal it from ``learning_rate`` at the end of the warm-up to
``final_lr_fraction x learning_rate`` at ``train.max_steps``: a fixed step budget ends on a
small learning rate instead of wherever plateau halving left it. ``warmup_steps`` ramps it
up linearly first (any schedule). Decay on plateau still applies: it scales the whole curve.
The values are checked where the config is built (``TrainConfig``).
"""

import math

from tablegen_tf.config import OptimizerConfig


def is_scheduled(config: OptimizerConfig) -> bool:
    return config.schedule != "constant" or config.warmup_steps > 0


def schedule_factor(config: OptimizerConfig, step: int, max_steps: int) -> float:
    """The multiple of ``learning_rate`` used by the update at 0-based ``step``."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.schedule == "constant":
        return 1.0
    span = max(max_steps - config.warmup_steps, 1)
    progress = min((step - config.warmup_steps) / span, 1.0)
    if config.schedule == "cosine":  # Loshchilov & Hutter 2017 (SGDR), one cycle, no restart
        shape = 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        shape = 1.0 - progress
    final = config.final_lr_fraction
    return final + (1.0 - final) * shape
