"""The deploy engine, one concern a module, pure of Django (see DESIGN.md).

assembly.py reads a cdk.out, intrinsics.py resolves a template against a state record,
plan.py computes cdkd's diff and the admin's plan document from the two.
"""
