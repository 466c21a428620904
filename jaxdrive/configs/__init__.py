"""Config files for ``jaxdrive train --config`` (``get_config()`` each); ``configs/`` at the repository root links
here."""
import importlib.util
import os


def sibling_config(here: str, name: str):
    """``get_config()`` of the config file ``name``.py beside ``here`` (a config's ``__file__``), loaded by path as
    ``jaxdrive train`` loads configs, so a preset and the base it extends always come from the same folder."""
    path = os.path.join(os.path.dirname(os.path.abspath(here)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config()
