"""``python -m inframind_ray.cli``."""

from inframind_ray.cli import main

main()
