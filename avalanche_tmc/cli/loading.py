"""The model and data factories: named ``module:function`` or ``path/to/file.py:function``,
loaded without the working directory on the path, called with the ``--option`` pairs."""

import contextlib
import importlib
import json
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional, Sequence

from .exits import FactoryError, UsageError

if TYPE_CHECKING:
    from torch import nn

__all__ = ["DEFAULT_MODEL", "DEFAULT_DATA", "Factories", "parse_options", "load_factory", "call_factory",
           "stdout_to_stderr"]

DEFAULT_MODEL = "avalanche_tmc.factories:digits_cnn"
"""``--model``'s default: a small CNN pre-trained on digits the default data leaves out."""
DEFAULT_DATA = "avalanche_tmc.factories:digits"
"""``--data``'s default: scikit-learn's digits in 5 class-incremental experiences."""


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_options(pairs: Sequence[str], flag: str = "--option") -> Dict[str, Any]:
    """``["n_experiences=5", "dataset_root=/data"]`` -> ``{"n_experiences": 5, "dataset_root":
    "/data"}`` (values read as JSON when they parse, else as strings)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"{flag} takes KEY=VALUE with KEY a Python name, got {pair!r}.")
        options[key] = _parse_value(value)
    return options


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what is printed to standard output to standard error for the block, Python's
    ``print`` and writes to file descriptor 1 alike (a C extension, a child process): the
    user's factories run inside it, so that the command's own output (``evaluate --json``)
    is all standard output holds."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved: Optional[int] = None
    try:
        saved = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # no file descriptors 1 or 2 to move: Python's streams only
        if saved is not None:
            os.close(saved)
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _exited(error: SystemExit, what: str) -> FactoryError:
    """The error for a factory that called ``sys.exit`` (it would end the command without
    output, with its own exit code)."""
    return FactoryError(f"{what} called sys.exit({error.code!r}); a factory returns its model or benchmark, or raises "
                        "an exception: remove the call to sys.exit (or exit()).")


def load_factory(spec: str) -> Callable[..., Any]:
    """The function named by ``"module:function"`` (an importable module; the working
    directory is not searched) or ``"path/to/file.py:function"`` (that file, loaded by its
    path). Raises :class:`FactoryError` with what went wrong."""
    target, sep, function = spec.rpartition(":")
    if not sep or not target or not function:
        raise FactoryError(f"A factory is named 'module:function' or 'path/to/file.py:function', got {spec!r}.")
    module = _factory_file(target, spec) if _names_a_file(target) else _factory_module(target, function, spec)
    try:
        return getattr(module, function)
    except AttributeError:
        raise FactoryError(f"{target!r} has no function {function!r} (factory {spec!r}).") from None
    except Exception as error:  # noqa: BLE001  (a module __getattr__ of the user's that fails)
        raise FactoryError(f"Reading {function!r} of {target!r} failed (factory {spec!r}): "
                           f"{type(error).__name__}: {error}") from None


def _names_a_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


def _factory_module(name: str, function: str, spec: str) -> Any:
    """An installed (or ``PYTHONPATH``) module, imported without the working directory."""
    if name.startswith(".") or not all(part.isidentifier() for part in name.split(".")):
        raise FactoryError(f"Cannot import {name!r} for factory {spec!r}: a module is named by its absolute dotted "
                           "name (e.g. avalanche_tmc.factories:digits), or a file by its path "
                           "(./my_factories.py:model).")
    try:
        return importlib.import_module(name)
    except SystemExit as error:
        raise _exited(error, f"Importing {name!r} for factory {spec!r}") from None
    except Exception as error:  # noqa: BLE001  (a module that fails at import: the user's to fix)
        if not isinstance(error, ImportError):
            raise FactoryError(f"Importing the module {name!r} of factory {spec!r} failed: "
                               f"{type(error).__name__}: {error}") from None
        local = os.path.join(*name.split(".")) + ".py"
        hint = (f" The command line does not import from the working directory (a file there could shadow an "
                f"installed package); name the file instead: {local if os.sep in local else './' + local}:{function}."
                if os.path.isfile(local) else " Name an installed module (e.g. avalanche_tmc.factories:digits) or a "
                "file by its path (./my_factories.py:model).")
        raise FactoryError(f"Cannot import {name!r} for factory {spec!r}: {error}.{hint}") from None


def _factory_file(target: str, spec: str) -> Any:
    """The Python file ``target`` as a module of its own (registered under a private name,
    so that pickling and dataclasses inside it work); its imports see the usual path."""
    import hashlib
    import importlib.util

    path = os.path.abspath(os.path.expanduser(target))
    if not os.path.isfile(path):
        raise FactoryError(f"No factory file {target!r} (factory {spec!r}): give the path of a .py file that defines "
                           "the function.")
    name = "avalanche_tmc_factory_" + hashlib.sha256(path.encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise FactoryError(f"Cannot load {target!r} as Python (factory {spec!r}): name a .py file.")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except SystemExit as error:
        del sys.modules[name]
        raise _exited(error, f"Loading the factory file {target!r}") from None
    except Exception as error:  # noqa: BLE001  (any failure of the user's file is reported as such)
        del sys.modules[name]
        raise FactoryError(f"Loading the factory file {target!r} failed: {type(error).__name__}: {error}") from error
    return module


def call_factory(spec: str, options: Dict[str, Any], what: str) -> Any:
    """``load_factory(spec)(**options)``, what it prints sent to standard error
    (:func:`stdout_to_stderr`); any failure of the factory, a call to ``sys.exit``
    included, is a :class:`FactoryError`."""
    with stdout_to_stderr():
        factory = load_factory(spec)
        try:
            result = factory(**options)
        except SystemExit as error:
            raise _exited(error, f"The {what} factory {spec}") from None
        except Exception as error:  # noqa: BLE001  (any failure of the user's factory is reported as such)
            raise FactoryError(f"The {what} factory {spec} failed with options {options}: "
                               f"{type(error).__name__}: {error}") from error
    return result


@dataclass(frozen=True)
class Factories:
    """The model and data factories of a command and their keyword arguments."""

    model: str = DEFAULT_MODEL
    data: str = DEFAULT_DATA
    model_options: Dict[str, Any] = field(default_factory=dict)
    data_options: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, model: str, data: str, both: Sequence[str], model_pairs: Sequence[str],
              data_pairs: Sequence[str]) -> "Factories":
        """From the ``--option``, ``--model-option`` and ``--data-option`` pairs (the specific
        ones override ``--option``)."""
        common = parse_options(both)
        return cls(model, data, {**common, **parse_options(model_pairs, "--model-option")},
                   {**common, **parse_options(data_pairs, "--data-option")})

    def network(self) -> "nn.Module":
        """The model factory's network (checked to be an ``nn.Module``)."""
        from torch import nn

        net = call_factory(self.model, self.model_options, "model")
        if not isinstance(net, nn.Module):
            raise FactoryError(f"The model factory {self.model} returned a {type(net).__name__}, not an nn.Module.")
        return net

    def benchmark(self) -> Any:
        """The data factory's benchmark (checked to have ``train_stream`` and ``test_stream``)."""
        bm = call_factory(self.data, self.data_options, "data")
        if not hasattr(bm, "train_stream") or not hasattr(bm, "test_stream"):
            raise FactoryError(f"The data factory {self.data} returned a {type(bm).__name__}, not an Avalanche "
                               "benchmark with train_stream and test_stream.")
        return bm
