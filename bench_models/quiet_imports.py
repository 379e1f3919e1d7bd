"""PEFT imports its optional quantization backends, and on a CPU machine they log, at import, what they cannot use
and this zoo does not need: torchao's prebuilt extensions for another Python ABI or GPU ("Failed to load
..._C_mxfp8...so"), torchao's enum registrations that torch now handles itself (``torch.utils._pytree``: "is an
Enum subclass and is now natively supported"), and bitsandbytes' optional CPU kernel from the hub ("Failed to
load CPU gemm_4bit_forward from kernels-community"). Those loggers are raised to ERROR while PEFT is first imported,
then given back their level: a warning they log later still shows."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

IMPORT_TIME_LOGGERS = ("torchao", "bitsandbytes.backends.cpu.ops", "torch.utils._pytree")


@contextlib.contextmanager
def quiet_optional_backends() -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in IMPORT_TIME_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
