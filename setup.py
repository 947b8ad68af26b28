# Package discovery lives here because two folders ship under other import names:
# - generated protobuf code sits in teleo_server/_proto but is imported as `teleo.v1` (the path
#   protoc writes into its imports), so no sys.path patching is needed anywhere;
# - the CUDA sources in kernels/ ship as package data of `teleo_server.kernels`, where the NVRTC
#   loader finds them in an installed (non-editable) package.
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["teleo_server", "teleo_server.*"]) + ["teleo", "teleo.v1", "teleo_server.kernels"],
    package_dir={"teleo": "teleo_server/_proto/teleo", "teleo_server.kernels": "kernels"},
    package_data={"teleo_server.kernels": ["*.cu"], "teleo_server.gpu": ["cuda_host.h"]},
)
