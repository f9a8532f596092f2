"""The trainplan command-line interface: the composition root over simulator, planner and executor.

Thin by design: each command group lives in its own module (``trainplan/cmd_*.py``) that parses,
calls the layers below, and prints. Nothing here models anything.
"""
