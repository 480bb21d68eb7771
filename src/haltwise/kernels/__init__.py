"""Linear kernels chosen by measurement on the host: formats (formats.py), the plan (plan.py), the module (planned_linear.py)."""
