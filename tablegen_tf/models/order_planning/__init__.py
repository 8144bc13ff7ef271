"""Order-planning (Sha et al. 2018): link + content hybrid attention with copy."""

from tablegen_tf.models.order_planning.model import OrderPlanning, OrderPlanningConfig  # noqa: F401
