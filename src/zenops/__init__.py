"""zenops: vLLM + ZenTorch inference on AMD EPYC CPUs, provisioned, served and benchmarked with one command."""

__version__ = "0.1.0"
