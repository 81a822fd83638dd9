"""Registering "uc-volume" with `datasets.load_dataset`.

`datasets` has no plugin mechanism: the builders it ships are listed in the
private `datasets.packaged_modules._PACKAGED_DATASETS_MODULES`, which
`load_dataset` consults before anything else. For a packaged name, `datasets`
then resolves `data_dir` into data files: dozens of recursive globs and a stat
per file (seconds on a FUSE volume), a guess at split names from file names
that can drop files, and a download-count request to the Hub. The builder
lists the volume itself, so for "uc-volume" alone the module factory is
replaced by one that skips all three. Both private pieces are checked first:
a `datasets` release that moves them fails here, with a clear message,
instead of misbehaving later.
"""

from __future__ import annotations

import importlib
import inspect

from air_core.doors import AirError, OptionError

NAME = "uc-volume"
MODULE = "air_hf.builder"
ROW_MODULES = ("air_hf.rows", "air_hf.shards", "air_hf.split_layout", "air_core.planning.rows", "air_core.read.parquet_io")
SUPPORTED = "datasets>=4.0,<6"


def register() -> None:
    """Make `load_dataset("uc-volume", data_dir="/Volumes/...")` use this package's builder.

    Raises:
        AirError: the installed `datasets` keeps its builder registry or module
            factory elsewhere than the supported versions do.
    """
    import datasets
    import datasets.builder
    import datasets.data_files
    import datasets.load
    import datasets.packaged_modules as packaged

    try:
        registry = packaged._PACKAGED_DATASETS_MODULES
        hash_lines = packaged._hash_python_lines
        factory = datasets.load.PackagedDatasetModuleFactory
        if datasets.load._PACKAGED_DATASETS_MODULES is not registry or not isinstance(registry, dict):
            raise AttributeError("load._PACKAGED_DATASETS_MODULES is not packaged_modules'")
        for owner, attr in ((factory, "get_module"), (datasets.load, "DatasetModule"),
                            (datasets.data_files, "DataFilesDict"),
                            (datasets.builder.DatasetBuilder, "_create_builder_config")):
            if not hasattr(owner, attr):
                raise AttributeError(f"{getattr(owner, '__name__', owner)}.{attr} is gone")
    except AttributeError as e:
        raise AirError(
            f"cannot register {NAME!r} with datasets {datasets.__version__}: its internals moved ({e}); "
            f"install a supported version: pip install '{SUPPORTED}'"
        ) from None
    # The hash names the Arrow cache's folder: it covers all the code that shapes the rows.
    sources = [inspect.getsource(importlib.import_module(m)) for m in (MODULE, *ROW_MODULES)]
    registry[NAME] = (MODULE, hash_lines("\n".join(sources).splitlines()))
    if not getattr(factory, "lists_uc_volume_itself", False):
        datasets.load.PackagedDatasetModuleFactory = _factory(factory, registry)


def _factory(base: type, registry: dict) -> type:
    from datasets.data_files import DataFilesDict
    from datasets.load import DatasetModule

    class PackagedModuleFactory(base):
        """datasets' factory for packaged builders, resolving no data files for uc-volume."""

        lists_uc_volume_itself = True

        def __init__(self, name: str, *args, **kwargs) -> None:
            if name != NAME:
                super().__init__(name, *args, **kwargs)
                return
            if kwargs.get("data_files") is not None:
                raise OptionError(
                    f"{NAME} lists data_dir itself and takes no data_files=: select files with "
                    "include= / exclude= globs relative to data_dir"
                )
            self.name = name

        def get_module(self):
            if self.name != NAME:
                return super().get_module()
            module_path, code_hash = registry[NAME]
            # An empty (not None) DataFilesDict: datasets insists a packaged builder has data files.
            return DatasetModule(module_path, code_hash, {"data_files": DataFilesDict(), "dataset_name": NAME})

    return PackagedModuleFactory
