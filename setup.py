# Package discovery lives here because the generated protobuf code sits under
# teleo_server/_proto but is imported as `teleo.v1` (the path protoc writes into its imports);
# mapping it as a package of its own means no sys.path patching anywhere.
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["teleo_server", "teleo_server.*"]) + ["teleo", "teleo.v1"],
    package_dir={"teleo": "teleo_server/_proto/teleo"},
)
