"""Launchers (mpirun.sh, simnet.sh, the Slurm example) and the benchmarks of `make bench`.

Installed with the package (pyproject.toml), so `from launch import bench` works from anywhere.
"""
