from setuptools import setup

setup(
    packages=[
        "flashgnn",
        "flashgnn._cuda",
        "flashgnn.ops",
        "flashgnn.nn",
        "flashgnn.data",
        "flashgnn.models",
        "flashgnn.kernels",
    ],
    package_dir={"flashgnn.models": "models", "flashgnn.kernels": "kernels"},
    package_data={"flashgnn.kernels": ["*.cu", "*.cuh"]},
)
