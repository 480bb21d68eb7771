"""Linear kernels chosen by measurement on the host.

formats.py (the LinearFormat seam and registry), plan.py (measuring), plan_cache.py, planned_linear.py
(the nn.Linear replacement), model_plan.py (plan a whole model).
"""
