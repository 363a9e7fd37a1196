"""Ctrl-C, SIGTERM and SIGHUP held off for steps a stop must not cut in two."""

import signal
import threading
from contextlib import ExitStack, contextmanager

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # the signals that stop a run


@contextmanager
def stops_held():
    """SIGINT, SIGTERM and SIGHUP noted while the block runs, and handled as they would have
    been once it is done, for steps a stop must not cut in two: committing a shard (an index
    that lists it without its counts), and forking the workers (a handler that raises while
    os.fork runs does so in an at-fork hook, where Python drops the exception, "Exception
    ignored in ...", and the Ctrl-C is lost; the CLI's handler, which ignores further ones,
    would leave the run deaf to them). Outside the main thread, which alone runs handlers,
    nothing to do; nor to a handler set outside Python (getsignal gives None), which could not
    be put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted = []
    held = [n for n in STOPS if signal.getsignal(n) is not None]
    try:
        with ExitStack() as handlers:  # each put back, even if a stop comes between two
            for number in held:
                previous = signal.signal(number, lambda n, _: noted.append(n))
                handlers.callback(signal.signal, number, previous)
            yield
    finally:
        if noted:
            signal.raise_signal(noted[0])  # to its own handler now
