from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["flashgnn", "flashgnn.*"])
    + ["flashgnn.models", "flashgnn.kernels"],
    package_dir={"flashgnn.models": "models", "flashgnn.kernels": "kernels"},
    package_data={"flashgnn.kernels": ["*.cu", "*.cuh"]},
)
