"""The rule catalog made executable: one checker module per area (registered by rule id in ``registry``, all
of them run by ``run``), ``validate_dag``, root causes and ``lookup_rule``."""
